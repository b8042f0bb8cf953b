//! A capture streamed over the control socket (`freeway capture --ctl`), both ends.
//!
//! The datapath's side: the tap is attached first, so that its id can go in the reply line;
//! its writer's output waits behind a [`Gate`] until that line is out, so the line always
//! comes first. While the capture runs, the control thread watches the client's connection
//! ([`hung_up`]): a client that closes it, or shuts its sending half, ends the capture (the
//! tap is detached, its writer finishes the stream and closes it), also when nothing has
//! matched and the writer would never have written again.
//!
//! The client's side ([`capture`]): it passes on whole records only ([`Framer`]), so the
//! file it writes is whole whatever happens; on Ctrl-C (or SIGTERM) it shuts its sending
//! half, reads what the datapath still sends until the end of the stream, and then reads the
//! tap's final counters from `capture list`, for tcpdump's summary ([`Summary`]).

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::protocol::{CtlError, Request, TapOptions};

/// How long the client waits for the end of the stream after asking for it.
const END_WAIT: Duration = Duration::from_secs(10);
/// How often the client checks for Ctrl-C while no data comes.
const POLL: Duration = Duration::from_millis(100);
/// Largest record a stream may announce (a pcap record or a pcapng block).
const MAX_RECORD: usize = 16 << 20;

/// A writer that holds everything back until it is opened (the reply line has been sent).
pub(crate) struct Gate<W> {
    inner: W,
    open: Option<Receiver<()>>,
    wait: Duration,
}

impl<W: Write> Gate<W> {
    /// `inner`, opened when `open` receives (or failing if it never does within `wait`).
    pub(crate) fn new(inner: W, open: Receiver<()>, wait: Duration) -> Gate<W> {
        Gate {
            inner,
            open: Some(open),
            wait,
        }
    }

    fn pass(&mut self) -> io::Result<()> {
        if let Some(rx) = self.open.take() {
            rx.recv_timeout(self.wait)
                .map_err(|_| io::Error::other("the capture's reply line was never sent"))?;
        }
        Ok(())
    }
}

impl<W: Write> Write for Gate<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.pass()?;
        self.inner.write(b)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.pass()?;
        self.inner.flush()
    }
}

/// Whether the client of `s` closed its connection or shut its sending half (it will read
/// no more of a capture it no longer wants). Never blocks.
pub(crate) fn hung_up(s: &UnixStream) -> bool {
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd that lives across the call; a zero timeout never blocks.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// Passes on whole records of a pcap or pcapng stream, holding back a partial one, and
/// counts the packets (pcap records; pcapng enhanced, simple and obsolete packet blocks).
#[derive(Debug, Default)]
pub struct Framer {
    buf: Vec<u8>,
    /// The stream's format and byte order, once its first bytes are known.
    kind: Option<Kind>,
    /// The pcap file header was passed on.
    header: bool,
    /// Packets passed on.
    pub packets: u64,
}

/// What a record is, for the framer's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Record {
    /// The pcap file header.
    Header,
    /// A packet.
    Packet,
    /// Anything else (pcapng section, interface and statistics blocks).
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Pcap { big: bool },
    PcapNg { big: bool },
}

impl Framer {
    /// Takes `data` and writes every record it completes to `out`.
    pub fn feed(&mut self, data: &[u8], out: &mut dyn Write) -> io::Result<()> {
        self.buf.extend_from_slice(data);
        let mut at = 0;
        while let Some((n, what)) = self.next_len(at)? {
            if self.buf.len() - at < n {
                break;
            }
            out.write_all(&self.buf[at..at + n])?;
            at += n;
            match what {
                Record::Header => self.header = true,
                Record::Packet => self.packets += 1,
                Record::Other => {}
            }
        }
        self.buf.drain(..at);
        Ok(())
    }

    /// Bytes held back: a record not whole yet.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The length and kind of the record at `at`, once enough of it is there to say.
    fn next_len(&mut self, at: usize) -> io::Result<Option<(usize, Record)>> {
        let b = &self.buf[at..];
        let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, format!("capture stream: {m}"));
        let kind = match self.kind {
            Some(k) => k,
            None => {
                let Some(m) = b.get(..4) else { return Ok(None) };
                let k = match m {
                    [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => Kind::Pcap { big: false },
                    [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => Kind::Pcap { big: true },
                    [0x0a, 0x0d, 0x0d, 0x0a] => {
                        let Some(bom) = b.get(8..12) else { return Ok(None) };
                        Kind::PcapNg {
                            big: bom == [0x1a, 0x2b, 0x3c, 0x4d],
                        }
                    }
                    _ => return Err(bad("neither pcap nor pcapng")),
                };
                self.kind = Some(k);
                k
            }
        };
        let word = |at: usize, big: bool| -> Option<usize> {
            let w: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
            Some(if big {
                u32::from_be_bytes(w)
            } else {
                u32::from_le_bytes(w)
            } as usize)
        };
        let (n, what) = match kind {
            Kind::Pcap { .. } if !self.header => return Ok(Some((24, Record::Header))),
            Kind::Pcap { big } => match word(8, big) {
                Some(len) => (16 + len, Record::Packet),
                None => return Ok(None),
            },
            Kind::PcapNg { big } => match (word(0, big), word(4, big)) {
                (Some(ty), Some(len)) => {
                    if len < 12 || len % 4 != 0 {
                        return Err(bad("a pcapng block of a bad length"));
                    }
                    (
                        len,
                        if matches!(ty, 2 | 3 | 6) {
                            Record::Packet
                        } else {
                            Record::Other
                        },
                    )
                }
                _ => return Ok(None),
            },
        };
        if n > MAX_RECORD {
            return Err(bad("a record longer than 16 MiB"));
        }
        Ok(Some((n, what)))
    }
}

/// What a capture ended with: tcpdump's summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Packets written to the output.
    pub captured: u64,
    /// Packets the tap's filter looked at ("received by filter"), when the datapath said.
    pub seen: Option<u64>,
    /// Packets the tap dropped (its rings full), when the datapath said.
    pub dropped: Option<u64>,
}

impl Summary {
    /// The summary as tcpdump prints it at the end of a capture ("1 packet captured").
    pub fn lines(&self) -> String {
        format!(
            "{} captured\n{} received by filter\n{} dropped by tap\n",
            packets(Some(self.captured)),
            packets(self.seen),
            packets(self.dropped)
        )
    }
}

/// `n packets` as tcpdump counts them in its summary: "1 packet", "0 packets"; "? packets"
/// when the datapath did not say.
pub fn packets(n: Option<u64>) -> String {
    match n {
        Some(1) => "1 packet".into(),
        Some(n) => format!("{n} packets"),
        None => "? packets".into(),
    }
}

/// Captures from the datapath listening at `path` into `out` until the tap's count is
/// reached, the datapath stops, or `stop` is set (Ctrl-C); `out` gets whole records only.
pub fn capture(path: &Path, tap: &TapOptions, out: &mut dyn Write, stop: &AtomicBool) -> Result<Summary, CtlError> {
    let mut s = super::connect(path)?;
    super::write_request(&mut s, &Request::Capture(tap.clone()))?;
    let mut r = io::BufReader::new(s.try_clone().map_err(|e| CtlError::Failed(e.to_string()))?);
    let reply = super::read_reply(&mut r)?;
    let id = reply.data["id"].as_u64();
    let _ = s.set_read_timeout(Some(POLL));
    let mut framer = Framer::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut ending: Option<Instant> = None;
    let failed = |e: io::Error| CtlError::Failed(format!("capture stream: {e}"));
    loop {
        if ending.is_none() && stop.load(Ordering::Relaxed) {
            // Ask for the end: the datapath detaches the tap and finishes the stream.
            let _ = s.shutdown(std::net::Shutdown::Write);
            ending = Some(Instant::now());
        }
        if ending.is_some_and(|t| t.elapsed() > END_WAIT) {
            break;
        }
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => framer.feed(&buf[..n], out).map_err(failed)?,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(failed(e)),
        }
    }
    out.flush().map_err(failed)?;
    let mut sum = Summary {
        captured: framer.packets,
        ..Summary::default()
    };
    if let Some(id) = id {
        // The tap's final counters: the control thread lists them once it has reaped the
        // ended tap, which can be a moment after the stream's end reached us.
        let deadline = Instant::now() + END_WAIT;
        while let Some(row) = super::send(path, &Request::CaptureList)
            .ok()
            .and_then(|list| list.data.as_array()?.iter().find(|r| r["id"] == id).cloned())
        {
            if row["state"] != "running" || Instant::now() > deadline {
                sum.seen = row["stats"]["seen"].as_u64();
                sum.dropped = row["stats"]["dropped"].as_u64();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_summary_counts_one_packet_in_the_singular_as_tcpdump_does() {
        let s = super::Summary {
            captured: 1,
            seen: Some(4),
            dropped: None,
        };
        assert_eq!(
            s.lines(),
            "1 packet captured\n4 packets received by filter\n? packets dropped by tap\n"
        );
    }

    use super::*;

    fn pcap(records: &[&[u8]]) -> Vec<u8> {
        let mut v = vec![0xd4, 0xc3, 0xb2, 0xa1];
        v.extend_from_slice(&[0; 20]);
        for r in records {
            v.extend_from_slice(&[0; 8]);
            v.extend_from_slice(&(r.len() as u32).to_le_bytes());
            v.extend_from_slice(&(r.len() as u32).to_le_bytes());
            v.extend_from_slice(r);
        }
        v
    }

    #[test]
    fn whole_records_pass_in_any_chunking_and_a_partial_one_is_held_back() {
        let s = pcap(&[b"abc", b"", b"0123456789"]);
        for chunk in [1, 2, 7, 16, 1000] {
            let mut f = Framer::default();
            let mut out = Vec::new();
            // All but the last 3 bytes: the last record is cut.
            for c in s[..s.len() - 3].chunks(chunk) {
                f.feed(c, &mut out).unwrap();
            }
            assert_eq!(out, pcap(&[b"abc", b""]), "chunks of {chunk}");
            assert_eq!(f.packets, 2);
            assert_eq!(f.pending(), 16 + 7);
            f.feed(&s[s.len() - 3..], &mut out).unwrap();
            assert_eq!(out, s);
            assert_eq!(f.packets, 3);
        }
    }

    #[test]
    fn pcapng_blocks_are_framed_and_only_packet_blocks_counted() {
        let block = |ty: u32, body: usize| {
            let len = (12 + body) as u32;
            let mut v = ty.to_le_bytes().to_vec();
            v.extend_from_slice(&len.to_le_bytes());
            v.extend(std::iter::repeat_n(0u8, body));
            v.extend_from_slice(&len.to_le_bytes());
            v
        };
        let mut shb = vec![0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a];
        shb.extend_from_slice(&[0; 12]);
        shb.extend_from_slice(&28u32.to_le_bytes());
        let mut s = shb;
        s.extend(block(1, 8));
        s.extend(block(6, 20));
        s.extend(block(6, 32));
        let mut f = Framer::default();
        let mut out = Vec::new();
        for c in s.chunks(5) {
            f.feed(c, &mut out).unwrap();
        }
        assert_eq!(out, s);
        assert_eq!(f.packets, 2);
    }

    #[test]
    fn garbage_and_absurd_lengths_are_errors_not_allocations() {
        let mut f = Framer::default();
        assert!(f.feed(b"GET / HTTP/1.1\r\n", &mut Vec::new()).is_err());
        let mut s = pcap(&[]);
        s.extend_from_slice(&[0; 8]);
        s.extend_from_slice(&u32::MAX.to_le_bytes());
        s.extend_from_slice(&u32::MAX.to_le_bytes());
        let mut f = Framer::default();
        assert!(f.feed(&s, &mut Vec::new()).is_err());
    }
}
