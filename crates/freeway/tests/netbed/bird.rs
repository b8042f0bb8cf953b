//! BIRD 2 daemons for the namespace tests of the Linux control plane: one in the foreground
//! in a node of a [`Bed`], with its own control socket, killed when dropped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Bed;

/// A BIRD daemon in the foreground, with its own control socket, killed when dropped.
pub struct Bird {
    child: Child,
    sock: String,
    ns: String,
}

impl Bird {
    pub fn start(bed: &Bed, name: &str, node: &str, conf: &str) -> Bird {
        let ns = format!("fw-{node}{}", bed.suffix);
        let path = bed.dir.join(format!("{name}.conf"));
        std::fs::write(&path, conf).unwrap();
        let sock = bed.dir.join(format!("{name}.ctl")).display().to_string();
        let pid = bed.dir.join(format!("{name}.pid")).display().to_string();
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, "bird", "-f", "-c"])
            .arg(&path)
            .args(["-s", &sock, "-P", &pid])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("bird starts");
        Bird { child, sock, ns }
    }

    pub fn cli(&self, cmd: &str) -> String {
        let o = Command::new("ip")
            .args(["netns", "exec", &self.ns, "birdc", "-s", &self.sock])
            .args(cmd.split(' '))
            .output()
            .expect("birdc runs");
        String::from_utf8_lossy(&o.stdout).to_string()
    }

    /// The BGP protocol `peer`'s state line (`... Established` and the time it got there).
    pub fn session(&self) -> String {
        self.session_of("peer")
    }

    /// The state line of the protocol `name`.
    pub fn session_of(&self, name: &str) -> String {
        self.cli(&format!("show protocols {name}"))
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or("")
            .to_string()
    }
}

impl Drop for Bird {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn bird_installed() -> bool {
    Command::new("sh")
        .args(["-c", "command -v bird && command -v birdc"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Waits (bounded by `limit`) until `ok`, polling; returns whether it came and when.
pub fn wait_for(limit: Duration, mut ok: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if ok() {
            return Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}
