//! Progress of a long answer on stderr (indicatif): shown only when stderr is a terminal and
//! the run has lasted over a second, and cleared when each step ends. Anywhere else (a script,
//! a test, a pipe, a file) nothing is written: what stderr says is what it said before.
//!
//! [`QUIET_ENV`] sets the second in milliseconds (the tests show a small fleet's progress on a
//! pseudo-terminal with 0).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

/// A short run says nothing: a bar that flashes by is noise.
const QUIET_FOR: Duration = Duration::from_secs(1);

/// The environment variable that sets how long a run stays quiet, in milliseconds (default
/// 1000).
pub const QUIET_ENV: &str = "VIRT_CPU_POLICY_PROGRESS_AFTER_MS";

/// Whether, and from when, steps are shown. `Clone`: the fleet keeps one for each step it
/// takes. [`Progress::off`] (the default) shows nothing.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// When the steps are shown from (the run's start and its quiet second), when stderr is
    /// a terminal; None: silent.
    since: Option<Instant>,
}

impl Progress {
    /// Shown on stderr when it is a terminal (and the run lasts over a second since now, or
    /// [`QUIET_ENV`]'s milliseconds), silent otherwise.
    #[must_use]
    pub fn on_terminal() -> Progress {
        let quiet = std::env::var(QUIET_ENV)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .map_or(QUIET_FOR, Duration::from_millis);
        Progress {
            since: std::io::stderr()
                .is_terminal()
                .then(|| Instant::now() + quiet),
        }
    }

    /// Never shown.
    #[must_use]
    pub fn off() -> Progress {
        Progress::default()
    }

    /// A step of `total` units (files, judgements) called `what` (`reading facts`).
    #[must_use]
    pub fn step(&self, what: &'static str, total: usize) -> Step {
        let bar = self.since.map(|since| {
            let bar =
                ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::hidden());
            bar.set_style(
                ProgressStyle::with_template("{msg:>14} [{bar:30}] {pos}/{len} ({elapsed})")
                    .map_or_else(
                        |_| ProgressStyle::default_bar(),
                        |s| s.progress_chars("=> "),
                    ),
            );
            bar.set_message(what);
            (bar, since)
        });
        Step {
            bar,
            shown: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// One step under way: [`Step::inc`] as units are done (from any thread); cleared when dropped.
#[derive(Debug)]
pub struct Step {
    /// The bar (drawn nowhere until the run is a second old) and when it is shown from; None:
    /// silent.
    bar: Option<(ProgressBar, Instant)>,
    /// Whether the bar draws on stderr yet.
    shown: std::sync::atomic::AtomicBool,
}

impl Step {
    /// `n` more units done.
    pub fn inc(&self, n: usize) {
        let Some((bar, since)) = &self.bar else {
            return;
        };
        // The target first: this count is the first drawn.
        if !self.shown.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() >= *since {
            self.shown.store(true, std::sync::atomic::Ordering::Relaxed);
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        bar.inc(n as u64);
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        if let Some((bar, _)) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_shows_nothing_and_costs_nothing() {
        let step = Progress::off().step("reading facts", 10);
        step.inc(5);
        assert!(step.bar.is_none());
    }

    #[test]
    fn a_bar_stays_hidden_for_the_first_second() {
        let p = Progress {
            since: Some(Instant::now() + QUIET_FOR),
        };
        let step = p.step("judging", 10);
        step.inc(1);
        assert!(!step.shown.load(std::sync::atomic::Ordering::Relaxed));
        let p = Progress {
            since: Some(Instant::now()),
        };
        let step = p.step("judging", 10);
        step.inc(1);
        assert!(step.shown.load(std::sync::atomic::Ordering::Relaxed));
    }
}
