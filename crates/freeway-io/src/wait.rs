//! Sleeping until a receive queue has something: one `epoll` instance over the descriptors of
//! a worker's queues ([`RxQueue::wait_fd`]).
//!
//! A worker builds one [`Waiter`] for all its receive queues when it starts (only if every
//! queue gives a descriptor: a queue that cannot wake it up must be polled) and calls
//! [`Waiter::wait`] when it has found nothing for a while. The fast path never calls it: a
//! worker with traffic makes no syscall to wait.
//!
//! Why `epoll` and not `poll(2)`: the descriptors are registered once, when the waiter is built,
//! and stay registered; a `poll()` call hooks a wait-queue entry onto every descriptor as it
//! goes to sleep, and on its return unhooks them all and asks every descriptor again whether it
//! is readable. That return is on the path of a frame that wakes a sleeping worker (a ping
//! through an idle Freeway waits for it), where `epoll_wait` takes the ready descriptor off the
//! instance's ready list and asks only it. The registrations are level-triggered, so a
//! descriptor is reported for as long as it is readable, as `poll()` would.
//!
//! A sleeping worker must also hear that the run stops, without a timeout that wakes it a few
//! hundred times a second to look at its stop flag: a [`StopWake`] is one `eventfd` that every
//! worker's waiter watches beside its queues ([`Waiter::with_stop`]). It is written once, when
//! the run stops, and never read: it stays readable, so every wait from then on returns at once
//! and no worker can miss it (one that was between its stop-flag check and `epoll_wait` when it
//! was written returns from that `epoll_wait` at once).
//! Timeouts are then only for the worker's own deadlines (frames waiting for a neighbour,
//! fragments to expire).
//!
//! Threads: a `Waiter` belongs to one worker; the descriptors stay owned by the queues (and the
//! stop signal), which outlive it: the worker drops the waiter before its queues, and builds a
//! new one when a port is added or removed. (A descriptor closed while registered leaves the
//! instance by itself: the kernel drops a registration when the last reference to its file
//! goes.)

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::RxQueue;

/// An `epoll` instance watching one worker's receive queues.
#[derive(Debug)]
pub struct Waiter {
    epfd: OwnedFd,
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
    /// none), or the kernel refuses the `epoll` instance: such a worker must keep polling.
    pub fn new<'a>(queues: impl IntoIterator<Item = &'a dyn RxQueue>) -> Option<Waiter> {
        let fds = queues
            .into_iter()
            .map(|q| q.wait_fd())
            .collect::<Option<Vec<_>>>()?;
        if fds.is_empty() {
            return None;
        }
        // SAFETY: epoll_create1 takes no pointers; a non-negative result is a new descriptor
        // that nothing else owns.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epfd < 0 {
            return None;
        }
        // SAFETY: `epfd` was just returned by epoll_create1 and is owned by no one else.
        let w = Waiter {
            epfd: unsafe { OwnedFd::from_raw_fd(epfd) },
        };
        fds.into_iter().try_for_each(|fd| w.add(fd)).ok()?;
        Some(w)
    }

    /// Registers `fd` for readability (level-triggered). Registering a descriptor twice (two
    /// queues on one socket) is the same as once.
    fn add(&self, fd: RawFd) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: `ev` is a live, initialised epoll_event for the whole call, which the kernel
        // only reads; `epfd` is live while `self` is, and `fd` is a descriptor its owner keeps
        // open (a bad one makes the call fail, nothing worse).
        let r = unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EEXIST) {
            Ok(())
        } else {
            Err(e)
        }
    }

    /// Also wakes when `stop` is signalled (see [`StopWake`]); `None` if the kernel refuses to
    /// watch it (the worker must then keep polling, or it could sleep through the stop).
    pub fn with_stop(self, stop: &StopWake) -> Option<Waiter> {
        self.add(stop.fd.as_raw_fd()).ok()?;
        Some(self)
    }

    /// Sleeps until a queue's descriptor is readable or `timeout` passes (rounded up to a
    /// millisecond). Returns at once when a frame is already there: the kernel reports a
    /// socket readable as long as user space has not taken its last frame, so a frame that
    /// arrived after the last `rx_burst` is never slept through.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<Woken> {
        let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int;
        // One event is enough: the caller polls every queue after any wake-up.
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: `ev` is a live, writable array of one epoll_event for the whole call, and
        // maxevents says one; `epfd` is live while `self` is.
        let r = unsafe { libc::epoll_wait(self.epfd.as_raw_fd(), &mut ev, 1, ms) };
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

    /// Makes the descriptor readable for good: every [`Waiter::wait`] that watches it returns
    /// at once from now on. Calling it again changes nothing that matters (the counter grows).
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
        let mut w1 = Waiter::new([&a as &dyn RxQueue]).unwrap().with_stop(&stop).unwrap();
        let mut w2 = Waiter::new([&a as &dyn RxQueue]).unwrap().with_stop(&stop).unwrap();
        assert_eq!(w1.wait(Duration::from_millis(1)).unwrap(), Woken::Timeout);
        stop.signal();
        for _ in 0..3 {
            assert_eq!(w1.wait(Duration::from_secs(60)).unwrap(), Woken::Ready);
            assert_eq!(w2.wait(Duration::from_secs(60)).unwrap(), Woken::Ready);
        }
    }
}
