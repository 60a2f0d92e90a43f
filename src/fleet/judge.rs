//! The judging of a fleet's pairs: each guest shape on each class of hosts (hosts alike in
//! what the judge reads), once, on first use or over the machine's cores
//! ([`Fleet::judge_shapes`]), and the `passthrough-group` reason of a host-passthrough guest.

use super::cpu_there::{CpuThere, cpu_on};
use super::{DEST, Fleet, Reason, SOURCE, SourceKey, arrival, not_compared, running};
use crate::destination::group::Source;
use crate::destination::{Arrival, CpuMapCache, judge};
use crate::domain::Domain;
use crate::finding::Code;
use crate::host::Host;
use crate::pipeline::Pipeline;
use crate::policy::Policy;
use std::rc::Rc;

/// [`not_compared`] of a pair's judged reasons with its known hazards' ([`Fleet::hazard_in`]):
/// a hazard that holds refuses it, one that may leaves it not compared.
fn with_hazards(judged: &[Reason], hazards: &[Reason]) -> bool {
    if hazards.is_empty() {
        return not_compared(judged);
    }
    let all: Vec<Reason> = judged.iter().chain(hazards).cloned().collect();
    not_compared(&all)
}

impl Fleet {
    /// Whether host `h` runs guest `g`: [`Fleet::reasons`] is empty, told without writing a
    /// reason's sentence (the views that count pairs ask it for every pair).
    #[must_use]
    pub fn runs(&self, g: usize, h: usize) -> bool {
        self.verdict(g, h).is_empty()
            && self.group(g, h, |_| ()).is_none()
            && (self.sources[g] == Some(h) || self.hazard_in(g, self.hosts[h].class).is_empty())
    }

    /// The judge's reasons for guest `g`'s shape on host `h`'s class, judged on first use.
    pub(super) fn verdict(&self, g: usize, h: usize) -> Rc<Vec<Reason>> {
        self.verdict_in(g, self.hosts[h].class)
    }

    /// The number of host classes (hosts alike in what the judge reads).
    #[must_use]
    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    /// Host `h`'s class, an index below [`Fleet::class_count`].
    #[must_use]
    pub fn class_of(&self, h: usize) -> usize {
        self.hosts[h].class
    }

    /// Whether the pair of guest `g` and host `h` was not compared ([`not_compared`]: nothing
    /// refuses it, but a fact its judgement needs is missing).
    #[must_use]
    pub fn not_compared(&self, g: usize, h: usize) -> bool {
        let hazards = if self.sources[g] == Some(h) {
            Vec::new()
        } else {
            self.hazard_in(g, self.hosts[h].class)
        };
        with_hazards(&self.verdict(g, h), &hazards) && self.group(g, h, |_| ()).is_none()
    }

    /// [`Fleet::not_compared`] for the hosts of class `c`, as [`Fleet::runs_in`].
    #[must_use]
    pub fn not_compared_in(&self, g: usize, c: usize) -> bool {
        with_hazards(&self.verdict_in(g, c), &self.hazard_in(g, c))
            && self.group_in(g, c, |_| ()).is_none()
    }

    /// Whether guest `g` runs on the hosts of class `c`, its own source host apart (a running
    /// guest's own host needs no migration: [`Fleet::runs`] there asks its verdict only).
    #[must_use]
    pub fn runs_in(&self, g: usize, c: usize) -> bool {
        self.verdict_in(g, c).is_empty()
            && self.group_in(g, c, |_| ()).is_none()
            && self.hazard_in(g, c).is_empty()
    }

    /// The judge's reasons for guest `g`'s shape on class `c`, judged on first use.
    pub(super) fn verdict_in(&self, g: usize, c: usize) -> Rc<Vec<Reason>> {
        let shape = self.guests[g].shape;
        let cached = self.verdicts.borrow().get(c, shape);
        cached.unwrap_or_else(|| self.store(c, shape, self.judge_in(g, c, false).reasons))
    }

    /// The judge ([`judge_shape_on`]) on guest `g`'s shape and class `c`, uncached; with the CPU
    /// the guest would have there when `with_cpu`.
    pub(super) fn judge_in(&self, g: usize, c: usize, with_cpu: bool) -> Judgement {
        let guest = &self.guests[g].facts;
        let mut one = judge_shape_on(
            &guest.domain,
            &self.none,
            arrival(guest.state),
            &[self.on_class(c)],
            with_cpu,
        );
        one.pop().unwrap_or_default()
    }

    /// What class `c` gives the judge, by reference.
    fn on_class(&self, c: usize) -> OnClass<'_> {
        let class = &self.classes[c];
        OnClass {
            host: &class.host,
            map: &class.map,
            cpu_model: class.caps_cpu.as_ref().and_then(|c| c.cpu.model.as_deref()),
        }
    }

    /// The CPU guest `g` would have on the hosts of class `c` ([`CpuThere`]), worked out on
    /// first use with the class's verdict, or by [`Fleet::judge_cpus`].
    pub(super) fn cpu_in(&self, g: usize, c: usize) -> CpuThere {
        let shape = self.guests[g].shape;
        let cached = self.cpus.borrow().get(c, shape);
        if let Some(cpu) = cached {
            return cpu;
        }
        let j = self.judge_in(g, c, true);
        let cpu = j
            .cpu
            .clone()
            .unwrap_or_else(|| CpuThere::unknown("not judged"));
        self.keep(c, shape, j);
        cpu
    }

    /// Keeps judgement `j` of `shape` on class `c`: its reasons when none are kept yet, its CPU
    /// when it has one.
    fn keep(&self, c: usize, shape: usize, j: Judgement) {
        let known = self.verdicts.borrow().has(c, shape);
        if !known {
            self.store(c, shape, j.reasons);
        }
        if let Some(cpu) = j.cpu {
            self.cpus.borrow_mut().put(c, shape, cpu);
        }
    }

    /// Keeps `reasons` as the verdict of `shape` on class `c`.
    pub(super) fn store(&self, c: usize, shape: usize, reasons: Vec<Reason>) -> Rc<Vec<Reason>> {
        let r = Rc::new(self.classes[c].names_judged(reasons));
        self.verdicts.borrow_mut().put(c, shape, r.clone());
        r
    }

    /// Judges every guest shape on each class of `classes` not judged yet, over the machine's
    /// cores ([`crate::parallel::map_ordered`]): what a view that asks every pair calls first,
    /// where judging one pair after the other on one core was a quarter of a 1,000-host fleet's
    /// time. Each shape is judged with its first guest's facts, as when judged on first use in
    /// guest order: the answers are the same.
    pub fn judge_shapes(&self, classes: &[usize]) {
        self.judge_all(classes, false);
    }

    /// [`Fleet::judge_shapes`], and the CPU each guest shape would have on each class of
    /// `classes` ([`CpuThere`]: what the page shows per host), from the same parse and the same
    /// judged facts.
    pub fn judge_cpus(&self, classes: &[usize]) {
        self.judge_all(classes, true);
    }

    /// [`Fleet::judge_shapes`] (and [`Fleet::judge_cpus`] when `with_cpu`): one job per guest
    /// shape, the shape parsed once for all the classes it is judged on (a guest's parse was a
    /// sixth of a large fleet's time when made once per class).
    fn judge_all(&self, classes: &[usize], with_cpu: bool) {
        let mut first: Vec<Option<usize>> = vec![None; self.shapes.len()];
        for (g, guest) in self.guests.iter().enumerate() {
            first[guest.shape].get_or_insert(g);
        }
        let jobs: Vec<(usize, usize, Vec<usize>)> = {
            let (verdicts, cpus) = (self.verdicts.borrow(), self.cpus.borrow());
            let known = |c: usize, s: usize| verdicts.has(c, s) && (!with_cpu || cpus.has(c, s));
            first
                .iter()
                .enumerate()
                .filter_map(|(s, g)| {
                    let todo: Vec<usize> =
                        classes.iter().copied().filter(|&c| !known(c, s)).collect();
                    Some((s, (*g)?, todo)).filter(|(_, _, todo)| !todo.is_empty())
                })
                .collect()
        };
        // The judge's inputs by reference: a class's cpu_map is shared (`Rc`) by the fleet,
        // not by the threads.
        let work: Vec<(&str, Arrival, Vec<OnClass<'_>>)> = jobs
            .iter()
            .map(|(_, g, todo)| {
                let guest = &self.guests[*g].facts;
                let on = todo.iter().map(|&c| self.on_class(c)).collect();
                (guest.domain.as_str(), arrival(guest.state), on)
            })
            .collect();
        let none = &self.none;
        let step = self.progress.step("judging", work.len());
        let judged = crate::parallel::map_ordered(&work, |(domain, arrival, on)| {
            let j = judge_shape_on(domain, none, *arrival, on, with_cpu);
            step.inc(1);
            j
        });
        drop(step);
        for ((s, _, todo), judgements) in jobs.into_iter().zip(judged) {
            for (c, j) in todo.into_iter().zip(judgements) {
                self.keep(c, s, j);
            }
        }
    }

    /// The `passthrough-group` reason of running guest `g` migrating to host `h`, its host
    /// names put in.
    pub(super) fn group_reason(&self, g: usize, h: usize) -> Option<Reason> {
        let src = self.guests[g].facts.host.as_deref();
        let dest = &self.hosts[h].name;
        self.group(g, h, |r| Reason {
            code: r.code,
            message: r
                .message
                .replace(SOURCE, src.unwrap_or_default())
                .replace(DEST, dest),
        })
    }

    /// `then` of the `passthrough-group` reason of running guest `g` migrating to host `h`
    /// ([`Passthrough::group`]), its host names as the markers [`SOURCE`] and [`DEST`]; None
    /// when there is none. Judged once per (passthrough CPU, source class, host class): hosts
    /// of one class have the same CPU.
    pub(super) fn group<T>(
        &self,
        g: usize,
        h: usize,
        then: impl FnOnce(&Reason) -> T,
    ) -> Option<T> {
        // The host itself: nothing moves.
        if self.sources[g] == Some(h) {
            return None;
        }
        self.group_in(g, self.hosts[h].class, then)
    }

    /// [`Fleet::group`] on a host of class `dest_class` other than the guest's own.
    pub(super) fn group_in<T>(
        &self,
        g: usize,
        dest_class: usize,
        then: impl FnOnce(&Reason) -> T,
    ) -> Option<T> {
        let guest = &self.guests[g];
        let kind = self.passthrough_shapes[guest.shape].filter(|_| running(guest))?;
        let src_index = self.sources[g];
        let src_key = match (&guest.facts.host, src_index) {
            (None, _) => SourceKey::Unknown,
            (Some(_), None) => SourceKey::Missing,
            (Some(_), Some(i)) => SourceKey::Class(self.hosts[i].class),
        };
        let key = (kind, src_key, dest_class);
        if let Some(r) = self.groups.borrow().get(&key) {
            return r.as_ref().map(then);
        }
        let source = match src_key {
            SourceKey::Unknown => Source::Unknown,
            SourceKey::Missing => Source::Missing(SOURCE),
            SourceKey::Class(c) => Source::Host(SOURCE, self.classes[c].passthrough_cpu()),
        };
        let dest_cpu = self.classes[dest_class].passthrough_cpu();
        let r = self.passthroughs[kind]
            .group(source, DEST, dest_cpu)
            .map(|f| Reason {
                code: f.code,
                message: f.message,
            });
        let answer = r.as_ref().map(then);
        self.groups.borrow_mut().insert(key, r);
        answer
    }
}

/// What one host class gives the judge, by reference: shared by the threads of
/// [`Fleet::judge_shapes`] (the fleet's own `Rc`s are not).
#[derive(Clone, Copy)]
pub(super) struct OnClass<'a> {
    host: &'a Host,
    map: &'a CpuMapCache,
    /// Its capabilities' host CPU model: what a `host-passthrough` guest is given there.
    cpu_model: Option<&'a str>,
}

/// One guest shape judged on one host class.
#[derive(Default)]
pub(super) struct Judgement {
    /// Why it cannot run there ([`judge_shape_on`]); empty when it runs.
    pub(super) reasons: Vec<Reason>,
    /// The CPU it would have there, when asked.
    pub(super) cpu: Option<CpuThere>,
}

/// The judge ([`crate::destination::judge`]) on one guest shape and each of `classes`, the
/// shape parsed once: per class, the reasons it cannot run there (a shape that cannot be
/// judged, as when the policy asks for a cluster CPU there is none of, is one reason), and the
/// CPU it would have there when `with_cpu` ([`cpu_on`], from the judge's own
/// pipeline).
pub(super) fn judge_shape_on(
    shape: &str,
    policy: &Policy,
    arrival: Arrival,
    classes: &[OnClass<'_>],
    with_cpu: bool,
) -> Vec<Judgement> {
    let every = |reasons: Vec<Reason>, basis: &'static str| -> Vec<Judgement> {
        classes
            .iter()
            .map(|_| Judgement {
                reasons: reasons.clone(),
                cpu: with_cpu.then(|| CpuThere::unknown(basis)),
            })
            .collect()
    };
    let dom = match Domain::parse(shape, "guest facts") {
        Ok(d) => d,
        Err(e) => {
            let internal = Reason {
                code: Code::Internal,
                message: e.to_string(),
            };
            return every(vec![internal], "unreadable guest facts");
        }
    };
    if !dom.in_scope() {
        return every(Vec::new(), "out of scope");
    }
    classes
        .iter()
        .map(|class| match Pipeline::new(&dom, policy, class.host) {
            Ok(p) => Judgement {
                reasons: reasons_of(&p, class.host, class.map, arrival),
                cpu: with_cpu.then(|| cpu_on(&p, class.host, class.cpu_model)),
            },
            Err(e) => Judgement {
                reasons: vec![Reason {
                    code: Code::Internal,
                    message: e.to_string(),
                }],
                cpu: with_cpu.then(|| CpuThere::unknown("facts not gathered")),
            },
        })
        .collect()
}

/// [`judge_shape_on`] of one host, its reasons only: a shape judged apart from the fleet's
/// classes (an upgraded host, a fix tried).
pub(super) fn judge_shape(
    shape: &str,
    policy: &Policy,
    host: &Host,
    map: &CpuMapCache,
    arrival: Arrival,
) -> Vec<Reason> {
    let on = OnClass {
        host,
        map,
        cpu_model: None,
    };
    let mut one = judge_shape_on(shape, policy, arrival, &[on], false);
    one.pop().unwrap_or_default().reasons
}

/// The judge's reasons for pipeline `p` on `host`.
fn reasons_of(
    p: &Pipeline<'_, '_>,
    host: &Host,
    map: &CpuMapCache,
    arrival: Arrival,
) -> Vec<Reason> {
    let j = judge(p, host, map, arrival);
    let blocking: Vec<Reason> = j
        .blocking()
        .into_iter()
        .map(|f| Reason {
            code: f.code,
            message: f.message.clone(),
        })
        .collect();
    if !blocking.is_empty() {
        return blocking;
    }
    // Nothing refuses it, but the CPU comparison libvirt makes at arrival, the floor of the
    // guest's OS at a start, or another check libvirt makes at start (a host-model CPU's
    // required features, `check='full'`, TCG's `check='partial'`), when the comparison here
    // did not settle the CPU, was not made for want of a fact: not "runs" ([`not_compared`]).
    let (cpu, compared) = match &j.cpu {
        crate::destination::CpuCompare::Unknown(why) => (Some(why.clone()), true),
        crate::destination::CpuCompare::NotCompared(_) => (None, false),
        _ => (None, true),
    };
    let floor = j
        .findings
        .iter()
        .filter(|f| {
            f.code == Code::NotCompared && (!compared || crate::validate::is_floor_finding(f))
        })
        .map(|f| f.message.clone());
    cpu.into_iter()
        .chain(floor)
        .map(|message| Reason {
            code: Code::NotCompared,
            message,
        })
        .collect()
}
