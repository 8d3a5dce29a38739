//! Stopping a run cleanly: SIGTERM, SIGINT and SIGUSR1 (SLURM's `--signal=B:USR1@N` warning, forwarded by the
//! job script) only set a flag. The sweep checks it before each cell and between repetitions, abandons the
//! current cell (it is measured again on resume), writes the partial bundle and exits with
//! [`EXIT_INTERRUPTED`]. A second SIGTERM or SIGINT ends the process at once with the same status: the journal
//! is already durable, so nothing finished is lost either way.
//!
//! signal-hook does the async-signal-safe part; there is no `unsafe` here.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};

/// Exit status of a run that stopped early on a signal and can be resumed (sysexits' `EX_TEMPFAIL`).
pub const EXIT_INTERRUPTED: u8 = 75;

/// The flag of the installed handlers, for [`interrupted`]: generations read it between two forward passes.
static INSTALLED: std::sync::OnceLock<Arc<AtomicUsize>> = std::sync::OnceLock::new();

/// Whether a stop signal has arrived since [`Stop::install`] (false when none is installed). The generation
/// loops check it between forward passes (one atomic load), so a stop does not wait for the end of a
/// repetition that may take minutes: the repetition is abandoned and its cell measured again on resume.
pub fn interrupted() -> bool {
    INSTALLED.get().is_some_and(|s| s.load(Ordering::Relaxed) != 0)
}

/// The signal that asked the process to stop since [`Stop::install`], if any (None when none is installed).
pub fn requested() -> Option<&'static str> {
    INSTALLED.get().and_then(|s| signal_name(s.load(Ordering::SeqCst)))
}

fn signal_name(signal: usize) -> Option<&'static str> {
    match signal {
        0 => None,
        s if s == SIGTERM as usize => Some("SIGTERM"),
        s if s == SIGINT as usize => Some("SIGINT"),
        s if s == SIGUSR1 as usize => Some("SIGUSR1"),
        _ => Some("a signal"),
    }
}

/// A stop request set by a signal handler and read by the sweep.
#[derive(Debug, Clone, Default)]
pub struct Stop {
    signal: Arc<AtomicUsize>,
    // Kept so that the handlers' flag outlives `install`.
    _any: Arc<AtomicBool>,
}

impl Stop {
    /// A flag no signal sets (library use, tests).
    pub fn never() -> Stop {
        Stop::default()
    }

    /// Installs the handlers for SIGTERM, SIGINT and SIGUSR1.
    pub fn install() -> std::io::Result<Stop> {
        let stop = Stop::default();
        for sig in [SIGTERM, SIGINT] {
            // Order matters: the shutdown check runs before the flag is set, so only a second signal exits.
            signal_hook::flag::register_conditional_shutdown(sig, i32::from(EXIT_INTERRUPTED), stop._any.clone())?;
            signal_hook::flag::register(sig, stop._any.clone())?;
        }
        for sig in [SIGTERM, SIGINT, SIGUSR1] {
            signal_hook::flag::register_usize(sig, stop.signal.clone(), sig as usize)?;
        }
        // The first installed flag is the process's (tests may install twice: the same signals set both).
        let _ = INSTALLED.set(stop.signal.clone());
        Ok(stop)
    }

    /// The signal that asked the run to stop, if any.
    pub fn requested(&self) -> Option<&'static str> {
        signal_name(self.signal.load(Ordering::SeqCst))
    }
}
