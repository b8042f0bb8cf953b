//! Sleeping until a receive queue has something: one `poll(2)` on the descriptors of a
//! worker's queues ([`RxQueue::wait_fd`]).
//!
//! A worker builds one [`Waiter`] for all its receive queues when it starts (only if every
//! queue gives a descriptor: a queue that cannot wake it up must be polled) and calls
//! [`Waiter::wait`] when it has found nothing for a while. The fast path never calls it: a
//! worker with traffic makes no syscall to wait.
//!
//! A sleeping worker must also hear that the run stops, without a timeout that wakes it a few
//! hundred times a second to look at its stop flag: a [`StopWake`] is one `eventfd` that every
//! worker's waiter polls beside its queues ([`Waiter::with_stop`]). It is written once, when the
//! run stops, and never read: it stays readable, so every wait from then on returns at once and
//! no worker can miss it (one that was between its stop-flag check and `poll()` when it was
//! written returns from that `poll()` at once). Timeouts are then only for the worker's own
//! deadlines (frames waiting for a neighbour, fragments to expire).
//!
//! Threads: a `Waiter` belongs to one worker; the descriptors stay owned by the queues, which
//! outlive it (the worker drops the waiter before its queues). A `StopWake` is shared (`Arc`)
//! by the workers and the thread that stops them.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::RxQueue;

/// The `pollfd` array of one worker's receive queues.
#[derive(Debug)]
pub struct Waiter {
    fds: Vec<libc::pollfd>,
}

/// What [`Waiter::wait`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    /// A descriptor became readable: a queue has frames (or an error to report).
    Ready,
    /// The timeout passed with nothing to read, or a signal interrupted the wait.
    Timeout,
}

impl Waiter {
    /// A waiter for `queues`, or `None` if one of them gives no descriptor (or there are
    /// none): such a worker must keep polling.
    pub fn new<'a>(queues: impl IntoIterator<Item = &'a dyn RxQueue>) -> Option<Waiter> {
        let fds = queues
            .into_iter()
            .map(|q| q.wait_fd().map(Waiter::pollfd))
            .collect::<Option<Vec<_>>>()?;
        (!fds.is_empty()).then_some(Waiter { fds })
    }

    fn pollfd(fd: RawFd) -> libc::pollfd {
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }
    }

    /// Also wakes when `stop` is signalled (see [`StopWake`]).
    pub fn with_stop(mut self, stop: &StopWake) -> Waiter {
        self.fds.push(Waiter::pollfd(stop.fd.as_raw_fd()));
        self
    }

    /// Sleeps until a queue's descriptor is readable or `timeout` passes (rounded up to a
    /// millisecond). Returns at once when a frame is already there: the kernel reports a
    /// socket readable as long as user space has not taken its last frame, so a frame that
    /// arrived after the last `rx_burst` is never slept through.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<Woken> {
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is a live, writable array of `len` initialised `pollfd`s for the whole
        // call; the kernel writes only their `revents`. The descriptors are owned by the
        // queues, which outlive the waiter.
        let r = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms) };
        match r {
            0 => Ok(Woken::Timeout),
            r if r > 0 => Ok(Woken::Ready),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    Ok(Woken::Timeout)
                } else {
                    Err(e)
                }
            }
        }
    }
}

/// The signal that wakes every sleeping worker when the run stops: an `eventfd` written once
/// ([`StopWake::signal`]) and never read, so it stays readable for good.
#[derive(Debug)]
pub struct StopWake {
    fd: OwnedFd,
}

impl StopWake {
    /// A new, unsignalled `eventfd`.
    pub fn new() -> io::Result<StopWake> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor that
        // nothing else owns.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by no one else.
        Ok(StopWake {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Makes the descriptor readable for good: every [`Waiter::wait`] that polls it returns at
    /// once from now on. Calling it again changes nothing that matters (the counter grows).
    pub fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: `one` is 8 readable bytes for the whole call, as eventfd's write wants; the
        // descriptor is live while `self` is. A failed write (the counter at its maximum)
        // means it is readable already.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use freeway_packet::{Batch, PacketPool};
    use freeway_sync::Tick;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    struct Q(Option<RawFd>);
    impl RxQueue for Q {
        fn rx_burst(&mut self, _: &mut Batch, _: &mut PacketPool, _: Tick) -> usize {
            0
        }
        fn wait_fd(&self) -> Option<RawFd> {
            self.0
        }
    }

    fn pipe() -> (UnixStream, UnixStream) {
        UnixStream::pair().unwrap()
    }

    #[test]
    fn a_queue_without_a_descriptor_means_no_waiter() {
        let (r, _w) = pipe();
        let a = Q(Some(r.as_raw_fd()));
        let b = Q(None);
        assert!(Waiter::new([&a as &dyn RxQueue, &b]).is_none());
        assert!(Waiter::new(std::iter::empty::<&dyn RxQueue>()).is_none());
        assert!(Waiter::new([&a as &dyn RxQueue]).is_some());
    }

    #[test]
    fn wakes_when_a_descriptor_is_readable_and_times_out_otherwise() {
        let (r1, _w1) = pipe();
        let (r2, mut w2) = pipe();
        let (a, b) = (Q(Some(r1.as_raw_fd())), Q(Some(r2.as_raw_fd())));
        let mut w = Waiter::new([&a as &dyn RxQueue, &b]).unwrap();
        assert_eq!(w.wait(Duration::from_millis(1)).unwrap(), Woken::Timeout);
        w2.write_all(b"x").unwrap();
        assert_eq!(w.wait(Duration::from_secs(60)).unwrap(), Woken::Ready);
    }

    #[test]
    fn a_signalled_stop_wakes_every_wait_from_then_on() {
        let (r, _w) = pipe();
        let a = Q(Some(r.as_raw_fd()));
        let stop = StopWake::new().unwrap();
        let mut w1 = Waiter::new([&a as &dyn RxQueue]).unwrap().with_stop(&stop);
        let mut w2 = Waiter::new([&a as &dyn RxQueue]).unwrap().with_stop(&stop);
        assert_eq!(w1.wait(Duration::from_millis(1)).unwrap(), Woken::Timeout);
        stop.signal();
        for _ in 0..3 {
            assert_eq!(w1.wait(Duration::from_secs(60)).unwrap(), Woken::Ready);
            assert_eq!(w2.wait(Duration::from_secs(60)).unwrap(), Woken::Ready);
        }
    }
}
