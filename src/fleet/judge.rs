//! The judging of a fleet's pairs: each guest shape on each class of hosts (hosts alike in
//! what the judge reads), once, on first use or over the machine's cores
//! ([`Fleet::judge_shapes`]), and the `passthrough-group` reason of a host-passthrough guest.

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
        let cached = self
            .verdicts
            .borrow()
            .get(c)
            .and_then(|row| row.get(shape).cloned().flatten());
        cached.unwrap_or_else(|| self.store(c, shape, self.judge_in(g, c)))
    }

    /// The judge ([`judge_shape`]) on guest `g`'s shape and class `c`, uncached.
    pub(super) fn judge_in(&self, g: usize, c: usize) -> Vec<Reason> {
        let class = &self.classes[c];
        let guest = &self.guests[g].facts;
        judge_shape(
            &guest.domain,
            &self.none,
            &class.host,
            &class.map,
            arrival(guest.state),
        )
    }

    /// Keeps `reasons` as the verdict of `shape` on class `c`.
    pub(super) fn store(&self, c: usize, shape: usize, reasons: Vec<Reason>) -> Rc<Vec<Reason>> {
        let r = Rc::new(self.classes[c].names_judged(reasons));
        let mut verdicts = self.verdicts.borrow_mut();
        if verdicts.len() <= c {
            verdicts.resize_with(c + 1, Vec::new);
        }
        let row = &mut verdicts[c];
        if row.len() <= shape {
            row.resize(shape + 1, None);
        }
        row[shape] = Some(r.clone());
        r
    }

    /// Judges every guest shape on each class of `classes` not judged yet, over the machine's
    /// cores ([`crate::parallel::map_ordered`]): what a view that asks every pair calls first,
    /// where judging one pair after the other on one core was a quarter of a 1,000-host fleet's
    /// time. Each shape is judged with its first guest's facts, as when judged on first use in
    /// guest order: the answers are the same.
    pub fn judge_shapes(&self, classes: &[usize]) {
        let mut first: Vec<Option<usize>> = vec![None; self.shapes.len()];
        for (g, guest) in self.guests.iter().enumerate() {
            first[guest.shape].get_or_insert(g);
        }
        let jobs: Vec<(usize, usize, usize)> = {
            let cached = self.verdicts.borrow();
            let known = |c: usize, s: usize| {
                cached
                    .get(c)
                    .and_then(|row| row.get(s))
                    .is_some_and(Option::is_some)
            };
            classes
                .iter()
                .flat_map(|&c| {
                    first
                        .iter()
                        .enumerate()
                        .filter_map(move |(s, g)| Some((c, s, (*g)?)))
                })
                .filter(|&(c, s, _)| !known(c, s))
                .collect()
        };
        // The judge's inputs by reference: a class's cpu_map is shared (`Rc`) by the fleet,
        // not by the threads.
        let work: Vec<(&str, &Host, &CpuMapCache, Arrival)> = jobs
            .iter()
            .map(|&(c, _, g)| {
                let (class, guest) = (&self.classes[c], &self.guests[g].facts);
                let map: &CpuMapCache = &class.map;
                (
                    guest.domain.as_str(),
                    &class.host,
                    map,
                    arrival(guest.state),
                )
            })
            .collect();
        let none = &self.none;
        let step = self.progress.step("judging", work.len());
        let judged = crate::parallel::map_ordered(&work, |&(domain, host, map, arrival)| {
            let reasons = judge_shape(domain, none, host, map, arrival);
            step.inc(1);
            reasons
        });
        drop(step);
        for ((c, s, _), reasons) in jobs.into_iter().zip(judged) {
            self.store(c, s, reasons);
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

/// The judge ([`crate::destination::judge`]) on one guest shape and one host: the reasons it
/// cannot run there. A shape that cannot be judged (the policy asks for a cluster CPU there is
/// none of) is one reason.
pub(super) fn judge_shape(
    shape: &str,
    policy: &Policy,
    host: &Host,
    map: &CpuMapCache,
    arrival: Arrival,
) -> Vec<Reason> {
    let dom = match Domain::parse(shape, "guest facts") {
        Ok(d) => d,
        Err(e) => {
            return vec![Reason {
                code: Code::Internal,
                message: e.to_string(),
            }];
        }
    };
    if !dom.in_scope() {
        return Vec::new();
    }
    let p = match Pipeline::new(dom, policy, host) {
        Ok(p) => p,
        Err(e) => {
            return vec![Reason {
                code: Code::Internal,
                message: e.to_string(),
            }];
        }
    };
    let j = judge(&p, shape, host, map, arrival);
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
