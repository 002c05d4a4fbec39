//! Files the proxy reads again when they change: a route's JWT keys (`jwt.rs`) and a webhook
//! route's secrets (`server.rs`). Invariant: a file is read again within a second or two of a
//! change to its size or modification time, for as long as what it feeds lives; a change that
//! cannot be read or used changes nothing (what was loaded stays in use, and the caller logs why).

use std::path::Path;
use std::sync::{Mutex, Weak};
use std::time::{Duration, SystemTime};

/// A file's size and modification time when it was last read (`None`: not read yet; `Some(None)`:
/// it could not be looked at).
pub(crate) struct Stamp(Mutex<Option<Option<(u64, SystemTime)>>>);

impl Stamp {
    /// The file as it is now (read it after taking the stamp, so that a change in between is
    /// seen at the next look).
    pub(crate) fn of(path: &Path) -> Stamp {
        Stamp(Mutex::new(Some(now(path))))
    }

    /// A file read before its stamp could be taken: the first look reads it again.
    pub(crate) fn unread() -> Stamp {
        Stamp(Mutex::new(None))
    }

    /// Whether the file changed since the last look (and so should be read again).
    pub(crate) fn changed(&self, path: &Path) -> bool {
        let now = Some(now(path));
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if *seen == now {
            return false;
        }
        *seen = now;
        true
    }
}

fn now(path: &Path) -> Option<(u64, SystemTime)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.len(), m.modified().ok()?))
}

/// Calls `look` on `target` every second, on a thread named `name`, until `target` is dropped.
pub(crate) fn every_second<T: Send + Sync + 'static>(
    name: &str,
    target: Weak<T>,
    look: fn(&T),
) -> Result<(), String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            let Some(t) = target.upgrade() else {
                return;
            };
            look(&t);
        })
        .map(drop)
        .map_err(|e| format!("cannot start the thread that watches files ({name}): {e}"))
}
