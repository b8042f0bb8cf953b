//! Sleeping until a receive queue has something: one `poll(2)` on the descriptors of a
//! worker's queues ([`RxQueue::wait_fd`]).
//!
//! A worker builds one [`Waiter`] for all its receive queues when it starts (only if every
//! queue gives a descriptor: a queue that cannot wake it up must be polled) and calls
//! [`Waiter::wait`] when it has found nothing for a while. The fast path never calls it: a
//! worker with traffic makes no syscall to wait.
//!
//! Threads: a `Waiter` belongs to one worker; the descriptors stay owned by the queues, which
//! outlive it (the worker drops the waiter before its queues).

use std::io;
use std::os::fd::RawFd;
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

#[cfg(test)]
mod tests {
    use super::*;
    use freeway_packet::{Batch, PacketPool};
    use freeway_sync::Tick;
    use std::io::Write;
    use std::os::fd::AsRawFd;
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
}
