//! The rendezvous wire format: length-prefixed frames and bounds-checked decoding.
//!
//! Anything can connect to the rendezvous port (a port scanner, a stray rank of another job, a
//! health check), so nothing read from a socket is trusted: every frame starts with a 4-byte
//! length that is checked against a limit *before* anything is allocated, the payload is read
//! incrementally (a peer that claims 200 MiB and sends 3 bytes costs 3 bytes), and every field is
//! decoded through [`Reader`], which fails instead of panicking when the bytes run out or a count
//! is larger than the bytes that could hold it.
//!
//! Frame: `u32 len (LE, counts the type byte and payload) | u8 type | payload`.

use std::io::{self, Read, Write};
use std::time::Duration;

use crate::error::BootstrapError;

/// First bytes of a hello: tells an efabench rendezvous from anything else on the port.
pub const MAGIC: &[u8; 8] = b"EFABRDZ1";
/// Largest hello frame (magic, numbers, token, host name) accepted before a peer is trusted.
pub const MAX_HELLO: u32 = 1024;
/// Largest blob one rank may contribute to a collective.
pub const MAX_BLOB: usize = 64 << 20;
/// Largest frame at all (an all-gather table with everyone's blobs).
pub const MAX_FRAME: u32 = 256 << 20;
/// Largest reason string carried in an abort or refusal.
pub const MAX_TEXT: usize = 1024;

pub const T_HELLO: u8 = 1;
pub const T_WELCOME: u8 = 2;
pub const T_REFUSE: u8 = 3;
pub const T_START: u8 = 4;
pub const T_HEARTBEAT: u8 = 5;
pub const T_CONTRIB: u8 = 6;
pub const T_RESULT: u8 = 7;
pub const T_ABORT: u8 = 8;
pub const T_FAIL: u8 = 9;
pub const T_BYE: u8 = 10;

/// Encode one frame.
pub fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(5 + payload.len());
    v.extend_from_slice(&((payload.len() as u32).wrapping_add(1)).to_le_bytes());
    v.push(kind);
    v.extend_from_slice(payload);
    v
}

pub fn write_frame(w: &mut impl Write, kind: u8, payload: &[u8]) -> io::Result<()> {
    w.write_all(&frame(kind, payload))
}

/// Read one frame of at most `max` bytes (type byte included).
///
/// The payload is read through `take`, so memory grows with the bytes that actually arrive,
/// never with the length a peer claims.
pub fn read_frame(r: &mut impl Read, max: u32) -> io::Result<(u8, Vec<u8>)> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len == 0 || len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes (limit {max})"),
        ));
    }
    let mut kind = [0u8; 1];
    r.read_exact(&mut kind)?;
    let want = (len - 1) as usize;
    let mut payload = Vec::with_capacity(want.min(64 << 10));
    r.by_ref().take(want as u64).read_to_end(&mut payload)?;
    if payload.len() != want {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed mid-frame",
        ));
    }
    Ok((kind[0], payload))
}

/// Bounds-checked reader over a received payload.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.buf.len() {
            return Err(format!("needs {n} more bytes, has {}", self.buf.len()));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, String> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub fn u32(&mut self) -> Result<u32, String> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn u64(&mut self) -> Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.bytes(8)?);
        Ok(u64::from_le_bytes(a))
    }
    /// A u32-length-prefixed byte string of at most `max` bytes.
    pub fn blob(&mut self, max: usize) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(format!("field of {n} bytes (limit {max})"));
        }
        self.bytes(n)
    }
    pub fn text(&mut self) -> Result<String, String> {
        Ok(String::from_utf8_lossy(self.blob(MAX_TEXT)?).into_owned())
    }
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }
    pub fn end(&self) -> Result<(), String> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(format!("{} unexpected trailing bytes", self.buf.len()))
        }
    }
}

pub fn put_blob(v: &mut Vec<u8>, b: &[u8]) {
    v.extend_from_slice(&(b.len() as u32).to_le_bytes());
    v.extend_from_slice(b);
}

pub fn put_text(v: &mut Vec<u8>, s: &str) {
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    put_blob(v, &s.as_bytes()[..end]);
}

/// Hello: what a rank says when it connects to rank 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub rank: u32,
    pub world: u32,
    pub pid: u32,
    pub token: String,
    pub host: String,
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64 + self.token.len() + self.host.len());
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&self.rank.to_le_bytes());
        v.extend_from_slice(&self.world.to_le_bytes());
        v.extend_from_slice(&self.pid.to_le_bytes());
        let tok = &self.token.as_bytes()[..self.token.len().min(crate::detect::MAX_TOKEN_LEN)];
        v.extend_from_slice(&(tok.len() as u16).to_le_bytes());
        v.extend_from_slice(tok);
        let host = &self.host.as_bytes()[..self.host.len().min(255)];
        v.push(host.len() as u8);
        v.extend_from_slice(host);
        v
    }

    pub fn decode(p: &[u8]) -> Result<Hello, String> {
        let mut r = Reader::new(p);
        if r.bytes(MAGIC.len())? != MAGIC {
            return Err("not an efabench hello".into());
        }
        let rank = r.u32()?;
        let world = r.u32()?;
        let pid = r.u32()?;
        let n = r.u16()? as usize;
        if n > crate::detect::MAX_TOKEN_LEN {
            return Err("token too long".into());
        }
        let token = String::from_utf8_lossy(r.bytes(n)?).into_owned();
        let n = r.u8()? as usize;
        let host = String::from_utf8_lossy(r.bytes(n)?).into_owned();
        r.end()?;
        Ok(Hello {
            rank,
            world,
            pid,
            token,
            host,
        })
    }
}

/// Which collective a contribution belongs to; every rank must call the same sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    AllGather = 1,
    Barrier = 2,
    Gather = 3,
    Broadcast = 4,
    /// An all-gather of an options fingerprint ([`crate::Bootstrap::check_same`]); its own code
    /// so that a rank that skips the check is caught as a collective mismatch.
    CheckSame = 5,
}

impl Op {
    pub fn from_u8(b: u8) -> Option<Op> {
        match b {
            1 => Some(Op::AllGather),
            2 => Some(Op::Barrier),
            3 => Some(Op::Gather),
            4 => Some(Op::Broadcast),
            5 => Some(Op::CheckSame),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Op::AllGather => "all_gather",
            Op::Barrier => "barrier",
            Op::Gather => "gather",
            Op::Broadcast => "broadcast",
            Op::CheckSame => "check_same",
        }
    }
}

/// Contribution: `u64 seq | u8 op | blob (rest of the frame)`.
pub fn encode_contrib(seq: u64, op: Op, blob: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(9 + blob.len());
    v.extend_from_slice(&seq.to_le_bytes());
    v.push(op as u8);
    v.extend_from_slice(blob);
    v
}

pub fn decode_contrib(p: &[u8]) -> Result<(u64, Op, &[u8]), String> {
    let mut r = Reader::new(p);
    let seq = r.u64()?;
    let op = r.u8()?;
    let op = Op::from_u8(op).ok_or_else(|| format!("unknown collective {op}"))?;
    let blob = r.rest();
    if blob.len() > MAX_BLOB {
        return Err(format!("blob of {} bytes (limit {MAX_BLOB})", blob.len()));
    }
    Ok((seq, op, blob))
}

/// A table of blobs: `u32 count | count × (u32 len | bytes)`.
pub fn encode_table<'a>(blobs: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&(blobs.len() as u32).to_le_bytes());
    for b in blobs {
        put_blob(&mut v, b);
    }
    v
}

/// Decode a table that must have exactly `expect` entries.
pub fn decode_table(p: &[u8], expect: u32) -> Result<Vec<Vec<u8>>, String> {
    let mut r = Reader::new(p);
    let n = r.u32()?;
    if n != expect {
        return Err(format!("table of {n} entries, expected {expect}"));
    }
    // Each entry needs at least its 4-byte length, so a count the bytes cannot hold is refused
    // before any allocation.
    if (n as usize).saturating_mul(4) > p.len() {
        return Err(format!("table claims {n} entries in {} bytes", p.len()));
    }
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        out.push(r.blob(MAX_BLOB)?.to_vec());
    }
    r.end()?;
    Ok(out)
}

/// Result: `u64 seq | payload`.
pub fn encode_result(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + payload.len());
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(payload);
    v
}

/// A failure travelling from rank 0 to every rank, so that all of them report the same cause.
pub fn encode_error(e: &BootstrapError) -> Vec<u8> {
    let mut v = Vec::new();
    let (kind, rank, ms, text, ranks): (u8, u32, u64, String, &[u32]) = match e {
        BootstrapError::Usage(m) => (0, 0, 0, m.clone(), &[]),
        BootstrapError::PeerDied { rank, host, detail } => {
            (1, *rank, 0, format!("{host}\n{detail}"), &[])
        }
        BootstrapError::PeerSilent {
            rank,
            host,
            silent_for,
        } => (2, *rank, silent_for.as_millis() as u64, host.clone(), &[]),
        BootstrapError::Aborted { rank, reason } => (3, *rank, 0, reason.clone(), &[]),
        BootstrapError::Timeout {
            op,
            waiting_for,
            after,
        } => (4, 0, after.as_millis() as u64, op.clone(), waiting_for),
        BootstrapError::Connect { addr, detail } => (5, 0, 0, format!("{addr}\n{detail}"), &[]),
        BootstrapError::Refused { addr, reason } => (6, 0, 0, format!("{addr}\n{reason}"), &[]),
        BootstrapError::Protocol { rank, detail } => (7, *rank, 0, detail.clone(), &[]),
        BootstrapError::Left { rank, op } => (8, *rank, 0, op.clone(), &[]),
        // "what" alone, or "what\ncause" when there is a cause (even an empty one).
        BootstrapError::Io { what, source } => match source {
            Some(cause) => (9, 0, 0, format!("{what}\n{cause}"), &[]),
            None => (9, 0, 0, what.clone(), &[]),
        },
    };
    v.push(kind);
    v.extend_from_slice(&rank.to_le_bytes());
    v.extend_from_slice(&ms.to_le_bytes());
    put_text(&mut v, &text);
    let shown = &ranks[..ranks.len().min(4096)];
    v.extend_from_slice(&(shown.len() as u32).to_le_bytes());
    for r in shown {
        v.extend_from_slice(&r.to_le_bytes());
    }
    v
}

pub fn decode_error(p: &[u8]) -> Result<BootstrapError, String> {
    let mut r = Reader::new(p);
    let kind = r.u8()?;
    let rank = r.u32()?;
    let ms = r.u64()?;
    let text = r.text()?;
    let n = r.u32()? as usize;
    if n > 4096 {
        return Err(format!("{n} ranks in a failure message"));
    }
    let mut ranks = Vec::with_capacity(n.min(p.len() / 4));
    for _ in 0..n {
        ranks.push(r.u32()?);
    }
    r.end()?;
    let split = |t: &str| {
        let (a, b) = t.split_once('\n').unwrap_or((t, ""));
        (a.to_string(), b.to_string())
    };
    let d = Duration::from_millis(ms);
    Ok(match kind {
        0 => BootstrapError::Usage(text),
        1 => {
            let (host, detail) = text.split_once('\n').unwrap_or(("", &text));
            BootstrapError::PeerDied {
                rank,
                host: host.into(),
                detail: detail.into(),
            }
        }
        2 => BootstrapError::PeerSilent {
            rank,
            host: text,
            silent_for: d,
        },
        3 => BootstrapError::Aborted { rank, reason: text },
        4 => BootstrapError::Timeout {
            op: text,
            waiting_for: ranks,
            after: d,
        },
        5 => {
            let (addr, detail) = split(&text);
            BootstrapError::Connect { addr, detail }
        }
        6 => {
            let (addr, reason) = split(&text);
            BootstrapError::Refused { addr, reason }
        }
        7 => BootstrapError::Protocol { rank, detail: text },
        8 => BootstrapError::Left { rank, op: text },
        9 => {
            let (what, cause) = match text.split_once('\n') {
                Some((w, c)) => (w.to_string(), Some(c)),
                None => (text, None),
            };
            BootstrapError::Io {
                what,
                source: cause.map(|c| std::sync::Arc::new(std::io::Error::other(c))),
            }
        }
        k => return Err(format!("unknown failure kind {k}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic xorshift so the fuzz-style tests are reproducible.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    #[test]
    fn frames_round_trip_and_lengths_are_bounded() {
        let f = frame(T_CONTRIB, b"hello");
        let (k, p) = read_frame(&mut &f[..], 100).unwrap();
        assert_eq!((k, p.as_slice()), (T_CONTRIB, &b"hello"[..]));
        // Over the limit: refused before reading or allocating the payload.
        let e = read_frame(&mut &f[..], 5).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let huge = [0xff, 0xff, 0xff, 0xff, T_HELLO];
        assert!(read_frame(&mut &huge[..], MAX_FRAME).is_err());
        let zero = [0, 0, 0, 0];
        assert!(read_frame(&mut &zero[..], MAX_FRAME).is_err());
        // Truncated: an error, never a short payload.
        let e = read_frame(&mut &f[..f.len() - 1], 100).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_claimed_length_costs_only_the_bytes_that_arrive() {
        // Claims 200 MiB, sends 10 bytes: the buffer stays small.
        let mut f = (200u32 << 20).to_le_bytes().to_vec();
        f.push(T_CONTRIB);
        f.extend_from_slice(&[1; 10]);
        let mut cursor = io::Cursor::new(f);
        assert!(read_frame(&mut cursor, MAX_FRAME).is_err());
        assert_eq!(cursor.position(), 15);
    }

    #[test]
    fn hello_round_trips() {
        let h = Hello {
            rank: 3,
            world: 8,
            pid: 77,
            token: "tok".into(),
            host: "h1".into(),
        };
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        assert!(h.encode().len() < MAX_HELLO as usize);
        let mut bad = h.encode();
        bad[0] = b'X';
        assert!(Hello::decode(&bad).is_err());
    }

    #[test]
    fn tables_and_errors_round_trip() {
        let blobs: Vec<Vec<u8>> = vec![vec![], vec![1, 2, 3], vec![9; 1000]];
        let t = encode_table(blobs.iter().map(|b| b.as_slice()));
        assert_eq!(decode_table(&t, 3).unwrap(), blobs);
        assert!(decode_table(&t, 4).is_err());
        let claims_many = u32::MAX.to_le_bytes();
        assert!(decode_table(&claims_many, u32::MAX).is_err());
        for e in [
            BootstrapError::PeerSilent {
                rank: 4,
                host: "node5".into(),
                silent_for: Duration::from_millis(2500),
            },
            BootstrapError::PeerDied {
                rank: 2,
                host: "node3".into(),
                detail: "its connection was reset".into(),
            },
            BootstrapError::Timeout {
                op: "barrier #3".into(),
                waiting_for: vec![1, 5],
                after: Duration::from_secs(9),
            },
            BootstrapError::Refused {
                addr: "h:1".into(),
                reason: "wrong token".into(),
            },
            BootstrapError::Aborted {
                rank: 2,
                reason: "out of memory".into(),
            },
            BootstrapError::Left {
                rank: 1,
                op: "gather".into(),
            },
            BootstrapError::io(
                "rank 0 cannot listen on h:1",
                std::io::Error::other("address in use"),
            ),
            BootstrapError::local("gather #2 would move too much"),
        ] {
            assert_eq!(decode_error(&encode_error(&e)).unwrap(), e);
        }
    }

    #[test]
    fn random_and_truncated_payloads_never_panic() {
        let mut rng = Rng(0x5eed_1234_abcd_ef01);
        let good = [
            Hello {
                rank: 1,
                world: 2,
                pid: 1,
                token: "t".into(),
                host: "h".into(),
            }
            .encode(),
            encode_table([&b"ab"[..], &b""[..]].into_iter()),
            encode_error(&BootstrapError::Timeout {
                op: "x".into(),
                waiting_for: vec![1],
                after: Duration::from_secs(1),
            }),
            encode_contrib(7, Op::Gather, b"blob"),
        ];
        for i in 0..20_000 {
            let buf = if i % 2 == 0 {
                let n = (rng.next() % 64) as usize;
                rng.bytes(n)
            } else {
                let g = &good[i % good.len()];
                let mut b = g[..(rng.next() as usize % (g.len() + 1))].to_vec();
                if !b.is_empty() && rng.next() % 2 == 0 {
                    let at = rng.next() as usize % b.len();
                    b[at] ^= rng.next() as u8 | 1;
                }
                b
            };
            let _ = Hello::decode(&buf);
            let _ = decode_table(&buf, 2);
            let _ = decode_table(&buf, (rng.next() % 100_000) as u32);
            let _ = decode_error(&buf);
            let _ = decode_contrib(&buf);
            let _ = read_frame(&mut &buf[..], MAX_HELLO);
        }
    }
}
