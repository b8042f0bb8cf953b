//! The TCP tracker: a state machine and sequence/window tracking in the manner of Linux
//! `nf_conntrack_proto_tcp` (Guido van Rooij's "Real Stateful TCP Packet Filtering in IP
//! Filter") and Open vSwitch `conntrack-tcp`.
//!
//! * **Flags**: only the combinations a real stack sends are valid (SYN, SYN+ACK, RST,
//!   RST+ACK, FIN+ACK, ACK, each with PSH/URG where meaningful; ECE/CWR ignored). Anything else
//!   (SYN+FIN, no flags, FIN without ACK, ...) is [`InvalidReason::TcpFlags`].
//! * **States**: one state per connection (NONE, SYN_SENT, SYN_RECV, ESTABLISHED, FIN_WAIT,
//!   CLOSE_WAIT, LAST_ACK, TIME_WAIT, CLOSE, SYN_SENT2), advanced by a transition table indexed by
//!   direction, segment kind (SYN, SYN-ACK, FIN, ACK, RST, none) and current state. Transitions
//!   that make no sense are [`InvalidReason::TcpState`]; some are *ignored* (accepted without
//!   a state change, e.g. a retransmitted SYN-ACK). A SYN in TIME_WAIT or CLOSE re-opens the
//!   connection (it starts over in SYN_SENT).
//! * **Windows**: per direction, the highest sequence end sent (`end`), the highest end the
//!   receiver's window allows (`maxend`) and the largest window seen (`maxwin`), with window
//!   scaling when both SYNs carried the option. A segment must satisfy the four checks of
//!   Rooij's paper (sequence below `maxend`, end not older than one window, ack not beyond what
//!   was sent, ack not older than one window); else [`InvalidReason::TcpWindow`]. Retransmits
//!   (old sequence numbers within a window) pass.
//! * **Mid-stream pickup** ("loose", on by default like Linux): an ACK without a connection
//!   creates one in ESTABLISHED with liberal window checking, since its history is unknown.
//!
//! Threads: the tracker state of a connection ([`TcpConn`]) is only touched under that
//! connection's own lock (see `table`); these functions are pure.

use freeway_packet::build::tcp_flags::{ACK, FIN, PSH, RST, SYN, URG};

use crate::extract::TcpSeg;
use crate::InvalidReason;

/// TCP states (the value stored in a connection's state byte).
pub mod state {
    /// No state (never stored after creation).
    pub const NONE: u8 = 0;
    /// SYN seen.
    pub const SYN_SENT: u8 = 1;
    /// SYN-ACK seen.
    pub const SYN_RECV: u8 = 2;
    /// Handshake complete.
    pub const ESTABLISHED: u8 = 3;
    /// One side sent FIN.
    pub const FIN_WAIT: u8 = 4;
    /// The FIN was acknowledged, the other side still open.
    pub const CLOSE_WAIT: u8 = 5;
    /// Both sides sent FIN.
    pub const LAST_ACK: u8 = 6;
    /// The last FIN was acknowledged.
    pub const TIME_WAIT: u8 = 7;
    /// Reset.
    pub const CLOSE: u8 = 8;
    /// Simultaneous open (SYN seen from both sides).
    pub const SYN_SENT2: u8 = 9;
    /// Names as `conntrack -L` prints them.
    pub const NAMES: [&str; 10] = [
        "NONE",
        "SYN_SENT",
        "SYN_RECV",
        "ESTABLISHED",
        "FIN_WAIT",
        "CLOSE_WAIT",
        "LAST_ACK",
        "TIME_WAIT",
        "CLOSE",
        "SYN_SENT2",
    ];
}

use state::*;

const IV: u8 = 10; // invalid
const IG: u8 = 11; // ignore

/// Segment kinds (rows of the transition table).
const I_SYN: usize = 0;
const I_SYNACK: usize = 1;
const I_FIN: usize = 2;
const I_ACK: usize = 3;
const I_RST: usize = 4;
const I_NONE: usize = 5;

const SS: u8 = SYN_SENT;
const SR: u8 = SYN_RECV;
const ES: u8 = ESTABLISHED;
const FW: u8 = FIN_WAIT;
const CW: u8 = CLOSE_WAIT;
const LA: u8 = LAST_ACK;
const TW: u8 = TIME_WAIT;
const CL: u8 = CLOSE;
const S2: u8 = SYN_SENT2;

/// `TRANSITIONS[dir][kind][state]`: dir 0 = original, 1 = reply. Columns are the states
/// NONE, SYN_SENT, SYN_RECV, ESTABLISHED, FIN_WAIT, CLOSE_WAIT, LAST_ACK, TIME_WAIT, CLOSE,
/// SYN_SENT2.
#[rustfmt::skip]
const TRANSITIONS: [[[u8; 10]; 6]; 2] = [
    [
        /* syn    */ [SS, SS, IG, IG, IG, IG, IG, SS, SS, S2],
        /* synack */ [IV, IV, SR, IV, IV, IV, IV, IV, IV, SR],
        /* fin    */ [IV, IV, FW, FW, LA, LA, LA, TW, CL, IV],
        /* ack    */ [ES, IV, ES, ES, CW, CW, TW, TW, CL, IV],
        /* rst    */ [IV, CL, CL, CL, CL, CL, CL, CL, CL, CL],
        /* none   */ [IV, IV, IV, IV, IV, IV, IV, IV, IV, IV],
    ],
    [
        /* syn    */ [IV, S2, IV, IV, IV, IV, IV, SS, IV, S2],
        /* synack */ [IV, SR, IG, IG, IG, IG, IG, IG, IG, SR],
        /* fin    */ [IV, IV, FW, FW, LA, LA, LA, TW, CL, IV],
        /* ack    */ [IV, IG, SR, ES, CW, CW, TW, TW, CL, IG],
        /* rst    */ [IV, CL, CL, CL, CL, CL, CL, CL, CL, CL],
        /* none   */ [IV, IV, IV, IV, IV, IV, IV, IV, IV, IV],
    ],
];

/// Window scale option seen on this direction's SYN.
const F_WSCALE: u8 = 0x01;
/// This direction sent the first FIN.
const F_CLOSE_INIT: u8 = 0x04;
/// Accept out-of-window segments (picked-up connections).
const F_LIBERAL: u8 = 0x08;

/// Acks may lag at most this far behind (or the sender's largest window, if larger).
const MAX_ACK_WINDOW: u32 = 66_000;

/// Window tracking for one direction (the sender's view).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpDir {
    end: u32,
    maxend: u32,
    maxwin: u32,
    scale: u8,
    flags: u8,
}

/// The tracker state of one connection (both directions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpConn {
    d: [TcpDir; 2],
}

/// What the tracker decided about a segment on an existing connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    /// Accepted; the connection is now in this state.
    Accept(u8),
    /// Accepted without a state change (retransmitted SYN-ACK and similar).
    Ignore,
    /// Not accepted.
    Invalid(InvalidReason),
    /// A SYN that re-opens a closed connection: start over as new.
    Reopen,
}

#[inline(always)]
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[inline(always)]
fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

/// Whether the flag combination is one a TCP stack sends.
#[inline]
pub fn valid_flags(flags: u8) -> bool {
    // The combinations of Linux `tcp_valid_flags` (ECE/CWR are ignored).
    matches!(
        flags & (FIN | SYN | RST | PSH | ACK | URG),
        0x02 | 0x22 | 0x12 | 0x04 | 0x14 | 0x1c | 0x11 | 0x31 | 0x19 | 0x39 | 0x10 | 0x30 | 0x18 | 0x38
    )
}

#[inline(always)]
fn kind(flags: u8) -> usize {
    if flags & RST != 0 {
        I_RST
    } else if flags & SYN != 0 {
        if flags & ACK != 0 {
            I_SYNACK
        } else {
            I_SYN
        }
    } else if flags & FIN != 0 {
        I_FIN
    } else if flags & ACK != 0 {
        I_ACK
    } else {
        I_NONE
    }
}

#[inline(always)]
fn seg_end(s: &TcpSeg) -> u32 {
    s.seq
        .wrapping_add(s.len)
        .wrapping_add(u32::from(s.flags & SYN != 0))
        .wrapping_add(u32::from(s.flags & FIN != 0))
}

/// Starts tracking from the first segment of a connection. Returns the tracker state and the
/// initial TCP state, or why the segment cannot create a connection.
pub fn init(s: &TcpSeg, loose: bool) -> Result<(TcpConn, u8), InvalidReason> {
    if !valid_flags(s.flags) {
        return Err(InvalidReason::TcpFlags);
    }
    let k = kind(s.flags);
    let mut c = TcpConn::default();
    let win = u32::from(s.win).max(1);
    let end = seg_end(s);
    match k {
        I_SYN => {
            c.d[0] = TcpDir {
                end,
                maxend: end,
                maxwin: win,
                scale: s.wscale.unwrap_or(0),
                flags: if s.wscale.is_some() { F_WSCALE } else { 0 },
            };
            Ok((c, SYN_SENT))
        }
        I_ACK if loose => {
            c.d[0] = TcpDir {
                end,
                maxend: end.wrapping_add(win),
                maxwin: win,
                scale: 0,
                flags: F_LIBERAL,
            };
            c.d[1].flags = F_LIBERAL;
            Ok((c, ESTABLISHED))
        }
        _ => Err(InvalidReason::NoConnection),
    }
}

/// Processes a segment of an existing connection in `state`, sent in direction `dir`
/// (0 original, 1 reply). `seen_reply`: the connection has seen a packet in the reply
/// direction before this one.
pub fn update(c: &mut TcpConn, state: u8, dir: usize, s: &TcpSeg) -> Update {
    if !valid_flags(s.flags) {
        return Update::Invalid(InvalidReason::TcpFlags);
    }
    let k = kind(s.flags);
    let new = TRANSITIONS[dir][k][usize::from(state.min(9))];
    match new {
        IV => return Update::Invalid(InvalidReason::TcpState),
        IG => return Update::Ignore,
        SYN_SENT if state == TIME_WAIT || state == CLOSE => return Update::Reopen,
        _ => {}
    }
    if !in_window(c, state, dir, s) {
        return Update::Invalid(InvalidReason::TcpWindow);
    }
    if new == FIN_WAIT && state != FIN_WAIT {
        c.d[dir].flags |= F_CLOSE_INIT;
    }
    Update::Accept(new)
}

/// The window checks, updating the tracker state on success.
fn in_window(c: &mut TcpConn, state: u8, dir: usize, s: &TcpSeg) -> bool {
    let [a, b] = &mut c.d;
    let (snd, rcv) = if dir == 0 { (a, b) } else { (b, a) };
    let mut seq = s.seq;
    let mut end = seg_end(s);
    let mut ack = s.ack;
    let mut win = u32::from(s.win);
    let syn = s.flags & SYN != 0;

    if snd.maxwin == 0 {
        // First segment in this direction.
        if syn {
            snd.end = end;
            snd.maxend = end;
            snd.maxwin = win.max(1);
            if let Some(ws) = s.wscale {
                snd.flags |= F_WSCALE;
                snd.scale = ws;
            }
            // Scaling applies only if both SYNs carried the option (RFC 7323).
            if snd.flags & rcv.flags & F_WSCALE == 0 {
                snd.scale = 0;
                rcv.scale = 0;
            }
            if s.flags & ACK == 0 {
                // Simultaneous open.
                return true;
            }
        } else {
            snd.end = end;
            let swin = win << snd.scale;
            snd.maxwin = swin.max(1);
            snd.maxend = end.wrapping_add(snd.maxwin);
            if rcv.maxwin == 0 {
                rcv.end = ack;
                rcv.maxend = ack;
            }
        }
    } else if ((state == SYN_SENT && dir == 0) || (state == SYN_RECV && dir == 1)) && after(end, snd.end) {
        // A re-initialised SYN (new ISN) during the handshake.
        snd.end = end;
        snd.maxend = end;
        snd.maxwin = win.max(1);
    }

    if s.flags & ACK == 0 || (s.flags & RST != 0 && ack == 0) {
        ack = rcv.end;
    }
    if s.flags & RST != 0 && seq == 0 && state == SYN_SENT {
        // RST answering a SYN.
        seq = snd.end;
        end = snd.end;
    }

    let max_ack_win = snd.maxwin.max(MAX_ACK_WINDOW);
    let ok = !after(seq, snd.maxend)
        && !before(end, snd.end.wrapping_sub(rcv.maxwin))
        && !after(ack, rcv.end)
        && !before(ack, rcv.end.wrapping_sub(max_ack_win));
    if !ok {
        return snd.flags & F_LIBERAL != 0 && s.flags & RST == 0;
    }
    if !syn {
        win <<= snd.scale;
    }
    if snd.maxwin < win {
        snd.maxwin = win;
    }
    if after(end, snd.end) {
        snd.end = end;
    }
    if rcv.maxwin != 0 && after(end, snd.maxend) {
        rcv.maxwin = rcv.maxwin.wrapping_add(end.wrapping_sub(snd.maxend));
    }
    if s.flags & ACK != 0 && after(ack.wrapping_add(win), rcv.maxend.wrapping_sub(1)) {
        rcv.maxend = ack.wrapping_add(win);
        if win == 0 {
            rcv.maxend = rcv.maxend.wrapping_add(1);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(flags: u8, seq: u32, ack: u32, len: u32) -> TcpSeg {
        TcpSeg {
            flags,
            seq,
            ack,
            win: 1000,
            len,
            wscale: None,
        }
    }

    #[test]
    fn flag_combinations() {
        for ok in [
            SYN,
            SYN | ACK,
            RST,
            RST | ACK,
            FIN | ACK,
            ACK,
            ACK | PSH,
            FIN | ACK | PSH | URG,
            SYN | URG,
        ] {
            assert!(valid_flags(ok), "{ok:#x}");
        }
        for bad in [
            0,
            FIN,
            SYN | FIN,
            SYN | RST,
            SYN | FIN | RST | PSH | ACK | URG,
            FIN | PSH | URG,
            PSH,
        ] {
            assert!(!valid_flags(bad), "{bad:#x}");
        }
    }

    #[test]
    fn handshake_data_teardown() {
        let (mut c, st) = init(&seg(SYN, 100, 0, 0), false).unwrap();
        assert_eq!(st, SYN_SENT);
        assert_eq!(
            update(&mut c, st, 1, &seg(SYN | ACK, 500, 101, 0)),
            Update::Accept(SYN_RECV)
        );
        assert_eq!(
            update(&mut c, SYN_RECV, 0, &seg(ACK, 101, 501, 0)),
            Update::Accept(ESTABLISHED)
        );
        assert_eq!(
            update(&mut c, ES, 0, &seg(ACK | PSH, 101, 501, 100)),
            Update::Accept(ES)
        );
        // Retransmit of the same data: fine.
        assert_eq!(
            update(&mut c, ES, 0, &seg(ACK | PSH, 101, 501, 100)),
            Update::Accept(ES)
        );
        // Far beyond the window: invalid.
        assert_eq!(
            update(&mut c, ES, 0, &seg(ACK, 101 + 1_000_000, 501, 10)),
            Update::Invalid(InvalidReason::TcpWindow)
        );
        // Acking data never sent: invalid.
        assert_eq!(
            update(&mut c, ES, 1, &seg(ACK, 501, 5000, 0)),
            Update::Invalid(InvalidReason::TcpWindow)
        );
        assert_eq!(update(&mut c, ES, 1, &seg(ACK, 501, 201, 0)), Update::Accept(ES));
        assert_eq!(update(&mut c, ES, 0, &seg(FIN | ACK, 201, 501, 0)), Update::Accept(FW));
        assert_eq!(update(&mut c, FW, 1, &seg(ACK, 501, 202, 0)), Update::Accept(CW));
        assert_eq!(update(&mut c, CW, 1, &seg(FIN | ACK, 501, 202, 0)), Update::Accept(LA));
        assert_eq!(update(&mut c, LA, 0, &seg(ACK, 202, 502, 0)), Update::Accept(TW));
        assert_eq!(update(&mut c, TW, 0, &seg(SYN, 9000, 0, 0)), Update::Reopen);
    }
}
