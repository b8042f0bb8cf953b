//! What the root tests share: a namespace of their own, a kernel twin (a tap device) in it.

use std::net::Ipv4Addr;

use freeway_linuxcp::{TwinSpec, Twins};

/// Moves the calling thread (and the threads it starts from now on) into a new network
/// namespace; `false` (the test skipped, loudly) when it cannot (not root).
pub fn fresh_netns() -> bool {
    // SAFETY: unshare has no memory preconditions.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        freeway_testkit::skip(format!(
            "cannot enter a new network namespace ({}): run as root",
            std::io::Error::last_os_error()
        ));
        return false;
    }
    true
}

/// Creates the twin `name` (10.0.0.1/24) and returns it with its device's index; `None` (the
/// test skipped, loudly) when no tap device can be made.
pub fn twin(name: &str) -> Option<(Twins, u32)> {
    let twins = match Twins::create(&[Some(TwinSpec {
        name: name.into(),
        mac: [0x02, 0, 0, 0, 0, 0x01],
        mtu: 1500,
        v4: vec![(Ipv4Addr::new(10, 0, 0, 1), 24)],
        v6: vec![],
    })]) {
        Ok(t) => t,
        Err(e) => {
            freeway_testkit::skip(format!("cannot create a tap device: {e}"));
            return None;
        }
    };
    let c = std::ffi::CString::new(name).expect("no NUL");
    // SAFETY: a valid NUL-terminated name.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert_ne!(idx, 0, "{name} has no index");
    Some((twins, idx))
}
