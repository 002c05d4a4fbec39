//! Throwaway PostgreSQL set-ups for one test (`scripts/pg-lab`): made in a directory of their
//! own, stopped and removed when the `Lab` is dropped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

pub struct Lab {
    dir: PathBuf,
    values: HashMap<String, String>,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/pg-lab")
}

impl Lab {
    /// Runs `pg-lab <args>` on a new directory named after `name`.
    pub fn new(name: &str, args: &[&str]) -> Lab {
        let dir = std::env::temp_dir().join(format!(
            "idemdb-lab-{name}-{}-{}",
            std::process::id(),
            idemdb::mint_key(&idemdb::SystemClock)
        ));
        let mut lab = Lab {
            dir,
            values: HashMap::new(),
        };
        lab.and(args[0], &args[1..]);
        lab
    }

    /// Runs `pg-lab <args>` (the directory already in `args`), keeping what it printed.
    pub fn run(&mut self, args: &[&str]) {
        let out = Command::new(script())
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run scripts/pg-lab: {e}"));
        assert!(
            out.status.success(),
            "scripts/pg-lab {args:?} failed (it sets up the PostgreSQL this test needs):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((k, v)) = line.split_once('=') {
                self.values.insert(k.to_string(), v.to_string());
            }
        }
    }

    /// Runs a further subcommand on this set-up (`bouncer --to PORT`, ...).
    pub fn and(&mut self, sub: &str, rest: &[&str]) {
        let dir = self.dir.to_str().expect("a UTF-8 temp dir").to_string();
        let mut all = vec![sub, dir.as_str()];
        all.extend_from_slice(rest);
        self.run(&all);
    }

    /// A value the set-up printed (`port`, `ca`, `url`, ...).
    pub fn get(&self, key: &str) -> String {
        self.values
            .get(key)
            .unwrap_or_else(|| panic!("scripts/pg-lab printed no {key}: {:?}", self.values))
            .clone()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(&self.dir).output();
    }
}
