//! Stopping a long-running command (`worlds serve`, `worlds dev`) on a signal: Ctrl-C (SIGINT)
//! and SIGTERM — what systemd, containers and orchestrators send — both stop it gracefully, the
//! requests and steps in flight finished first. The handlers are installed when [`Stop`] is
//! made, so a signal that comes while the world is still starting is not lost, and SIGTERM no
//! longer ends the process at once.

use std::io;

/// Ctrl-C and SIGTERM, listened for from when it is made.
pub(crate) struct Stop {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Stop {
    /// Installs the handlers (inside a Tokio runtime).
    pub(crate) fn listen() -> io::Result<Stop> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Stop {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Stop {})
        }
    }

    /// The next signal: what to call it in a message (`Ctrl-C`, `SIGTERM`). Cancel-safe, so it
    /// can sit in a `select!` loop.
    pub(crate) async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => "Ctrl-C",
                _ = self.terminate.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}
