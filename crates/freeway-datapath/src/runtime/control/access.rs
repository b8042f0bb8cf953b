//! Who may use the control socket: its owner (the user the datapath runs as) and root always;
//! the members of `--ctl-group` for everything; the members of `--ctl-read-group` for requests
//! that only read (stats, tables, trace). Checked on every connection with the peer's
//! credentials from the kernel (`SO_PEERCRED` for its user and group, `SO_PEERGROUPS` for its
//! supplementary groups), so the file's mode is only the first gate.
//!
//! The socket file's mode follows: 0600 with no group; 0660 and owned by the group with
//! `--ctl-group` only; 0666 with a read group (a file has one group, so the check per
//! connection is the gate; anyone else who connects gets a `forbidden` error).
//!
//! Threads: [`Access`] is built once at start and read by the client threads.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use super::protocol::Request;

/// Who may send which requests (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// Members may send every request.
    pub group: Option<Group>,
    /// Members may send the requests that only read.
    pub read_group: Option<Group>,
}

/// A group, by name and id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// As given (a name, or a number).
    pub name: String,
    /// Its id.
    pub gid: u32,
}

impl Group {
    /// The group called `name` in the system's group database, or the numeric id `name`.
    pub fn resolve(name: &str) -> Result<Group, String> {
        if let Ok(gid) = name.parse::<u32>() {
            return Ok(Group { name: name.into(), gid });
        }
        let c = std::ffi::CString::new(name).map_err(|_| format!("group {name:?}: not a group name"))?;
        let mut grp: libc::group = unsafe_zeroed_group();
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        let mut out: *mut libc::group = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: `c` is a NUL-terminated string, `grp`
        // and `out` are live locals, `buf` is `buf.len()` bytes that `getgrnam_r` may fill.
        let rc = unsafe { libc::getgrnam_r(c.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut out) };
        if rc != 0 {
            return Err(format!("group {name:?}: {}", io::Error::from_raw_os_error(rc)));
        }
        if out.is_null() {
            return Err(format!("group {name:?}: no such group"));
        }
        Ok(Group {
            name: name.into(),
            gid: grp.gr_gid,
        })
    }
}

/// A `libc::group` with every field zero (null pointers), for `getgrnam_r` to fill.
fn unsafe_zeroed_group() -> libc::group {
    // SAFETY: `libc::group` is a plain C struct of pointers and integers, for which all-zero
    // bytes are a valid value (null pointers, zero ids).
    unsafe { std::mem::zeroed() }
}

/// The credentials of the process at the other end of a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its user id.
    pub uid: u32,
    /// Its group id.
    pub gid: u32,
    /// Its supplementary groups.
    pub groups: Vec<u32>,
}

impl Peer {
    /// The kernel's record of who connected on `s`.
    pub fn of(s: &UnixStream) -> io::Result<Peer> {
        let fd = s.as_raw_fd();
        let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` is a live `ucred` and `len` its size, as SO_PEERCRED wants.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                std::ptr::from_mut(&mut cred).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut groups = vec![0 as libc::gid_t; 64];
        loop {
            let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
            // SAFETY: `groups` is `len` bytes of `gid_t`s for the kernel to fill; on ERANGE it
            // writes nothing and sets `len` to the size needed.
            let rc = unsafe {
                libc::getsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_PEERGROUPS,
                    groups.as_mut_ptr().cast(),
                    &mut len,
                )
            };
            let n = len as usize / std::mem::size_of::<libc::gid_t>();
            if rc == 0 {
                groups.truncate(n);
                break;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) && n > groups.len() && n <= 65_536 {
                groups.resize(n, 0);
                continue;
            }
            return Err(e);
        }
        Ok(Peer {
            uid: cred.uid,
            gid: cred.gid,
            groups,
        })
    }

    fn in_group(&self, g: Option<&Group>) -> bool {
        g.is_some_and(|g| self.gid == g.gid || self.groups.contains(&g.gid))
    }
}

/// Whether a request needs the full group: it changes the datapath, or it streams packets
/// (their payloads are as private as a capture file).
fn needs_full_access(r: &Request) -> bool {
    r.is_change() || matches!(r, Request::Capture(_))
}

impl Access {
    /// The socket file's mode (see the module docs).
    pub fn mode(&self) -> u32 {
        match (&self.group, &self.read_group) {
            (_, Some(_)) => 0o666,
            (Some(_), None) => 0o660,
            (None, None) => 0o600,
        }
    }

    /// Whether `peer` may connect at all (some request is open to it); `owner` is the uid the
    /// datapath runs as.
    pub fn admits(&self, peer: &Peer, owner: u32) -> bool {
        peer.uid == 0
            || peer.uid == owner
            || peer.in_group(self.group.as_ref())
            || peer.in_group(self.read_group.as_ref())
    }

    /// Whether `peer` may send `r`: `Err` names what it lacks.
    pub fn check(&self, peer: &Peer, owner: u32, r: &Request) -> Result<(), String> {
        if peer.uid == 0 || peer.uid == owner || peer.in_group(self.group.as_ref()) {
            return Ok(());
        }
        let full = || match &self.group {
            Some(g) => format!("membership of group {:?} (--ctl-group)", g.name),
            None => "the datapath's own user or root".into(),
        };
        if needs_full_access(r) {
            return Err(format!(
                "user {} may not send {:?}: it needs {}",
                peer.uid,
                r.command(),
                full()
            ));
        }
        if peer.in_group(self.read_group.as_ref()) {
            return Ok(());
        }
        Err(format!(
            "user {} may not use this control socket: it needs {}",
            peer.uid,
            full()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> Access {
        Access {
            group: Some(Group {
                name: "fw-admin".into(),
                gid: 900,
            }),
            read_group: Some(Group {
                name: "fw-ro".into(),
                gid: 901,
            }),
        }
    }

    fn peer(uid: u32, gid: u32, groups: &[u32]) -> Peer {
        Peer {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    /// Root and the owner may do everything; the full group everything; the read group only
    /// reads; anyone else nothing.
    #[test]
    fn who_may_send_what() {
        let a = access();
        let change = Request::FdbFlush;
        let read = Request::Stats;
        let capture = Request::Capture(serde_json::from_str(r#"{"port":"lan"}"#).unwrap());
        for (p, reads, changes) in [
            (peer(0, 0, &[]), true, true),
            (peer(1000, 1000, &[]), true, true),
            (peer(2000, 900, &[]), true, true),
            (peer(2000, 100, &[5, 900]), true, true),
            (peer(2000, 901, &[]), true, false),
            (peer(2000, 100, &[901]), true, false),
            (peer(2000, 100, &[5, 6]), false, false),
        ] {
            assert_eq!(a.check(&p, 1000, &read).is_ok(), reads, "{p:?} reading");
            assert_eq!(a.check(&p, 1000, &change).is_ok(), changes, "{p:?} changing");
            assert_eq!(a.check(&p, 1000, &capture).is_ok(), changes, "{p:?} capturing");
            assert_eq!(a.admits(&p, 1000), reads, "{p:?} admitted");
        }
        let e = a.check(&peer(2000, 901, &[]), 1000, &change).unwrap_err();
        assert!(e.contains("fdb_flush") && e.contains("fw-admin"), "{e}");
    }

    #[test]
    fn the_mode_opens_only_as_far_as_needed() {
        assert_eq!(Access::default().mode(), 0o600);
        let mut a = access();
        assert_eq!(a.mode(), 0o666);
        a.read_group = None;
        assert_eq!(a.mode(), 0o660);
    }

    #[test]
    fn groups_resolve_by_number_and_name() {
        assert_eq!(Group::resolve("4242").unwrap().gid, 4242);
        assert_eq!(Group::resolve("root").unwrap().gid, 0);
        let e = Group::resolve("no-such-group-freeway").unwrap_err();
        assert!(e.contains("no such group"), "{e}");
        assert!(Group::resolve("a\0b").is_err());
    }

    /// A connection's peer is this very process.
    #[test]
    fn the_peer_is_read_from_the_kernel() {
        let (a, _b) = UnixStream::pair().unwrap();
        let p = Peer::of(&a).unwrap();
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        assert_eq!((p.uid, p.gid), (uid, gid));
    }
}
