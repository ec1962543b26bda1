//! The wire formats of a rail group, exchanged between ranks before any fabric traffic: a
//! [`GroupAddress`] (every rail's endpoint name) and a [`RegionDescriptor`] (every rail's
//! [`RemoteRegion`] of one buffer). Both are rail-aligned (entry *i* is rail *i*), start with a
//! magic and a count, and decode with bounds: a count or length from the peer is never trusted.

use crate::error::{Error, Result};
use crate::rail::RemoteRegion;

/// Most rails a group may have (and a peer's descriptor may claim): 4× the 32 NICs of a p5.
pub const MAX_RAILS: usize = 128;
/// Longest endpoint name accepted from a peer (EFA: 32 bytes, tcp: 16–28, shm: up to 256).
pub const MAX_ADDRESS_BYTES: usize = 4096;

const DESCRIPTOR_MAGIC: &[u8; 4] = b"EFRD";
const ADDRESS_MAGIC: &[u8; 4] = b"EFGA";

/// What a peer needs to target one buffer over every rail: each rail's [`RemoteRegion`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionDescriptor {
    rails: Vec<RemoteRegion>,
}

impl RegionDescriptor {
    /// A descriptor from per-rail regions (1..=[`MAX_RAILS`] of them).
    pub fn new(rails: Vec<RemoteRegion>) -> Result<Self> {
        check_count(rails.len(), "region descriptor")?;
        Ok(RegionDescriptor { rails })
    }
    /// Rail `i`'s region (panics when out of range, like slice indexing).
    pub fn rail(&self, i: usize) -> &RemoteRegion {
        &self.rails[i]
    }
    /// Number of rails described.
    pub fn rails(&self) -> usize {
        self.rails.len()
    }
    /// `"EFRD"`, rail count (u32 LE), then each rail's [`RemoteRegion::to_bytes`].
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(8 + self.rails.len() * RemoteRegion::BYTES);
        b.extend_from_slice(DESCRIPTOR_MAGIC);
        b.extend_from_slice(&(self.rails.len() as u32).to_le_bytes());
        for r in &self.rails {
            b.extend_from_slice(&r.to_bytes());
        }
        b
    }
    /// Parses [`RegionDescriptor::to_bytes`]; the count must match the length exactly.
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        let mut rd = Reader::new(b, DESCRIPTOR_MAGIC, "region descriptor")?;
        let n = rd.count()?;
        let need = n * RemoteRegion::BYTES;
        if rd.rest().len() != need {
            return Err(Error::Usage(format!(
                "a region descriptor of {n} rails is {} bytes, got {} (peer running another efabench version?)",
                8 + need,
                b.len()
            )));
        }
        let rails = rd
            .rest()
            .chunks_exact(RemoteRegion::BYTES)
            .map(RemoteRegion::from_bytes)
            .collect::<Result<Vec<_>>>()?;
        Ok(RegionDescriptor { rails })
    }
}

/// Every rail's endpoint name, to give to peers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupAddress {
    rails: Vec<Vec<u8>>,
}

impl GroupAddress {
    /// An address from per-rail endpoint names.
    pub fn new(rails: Vec<Vec<u8>>) -> Result<Self> {
        check_count(rails.len(), "group address")?;
        if let Some(a) = rails.iter().find(|a| a.len() > MAX_ADDRESS_BYTES) {
            return Err(Error::Usage(format!(
                "an endpoint name of {} bytes exceeds the {MAX_ADDRESS_BYTES}-byte limit",
                a.len()
            )));
        }
        Ok(GroupAddress { rails })
    }
    /// Every rail's endpoint name, in rail order.
    pub fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.rails.iter().map(Vec::as_slice)
    }
    /// Rail `i`'s endpoint name.
    pub fn rail(&self, i: usize) -> &[u8] {
        &self.rails[i]
    }
    /// Number of rails.
    pub fn rails(&self) -> usize {
        self.rails.len()
    }
    /// `"EFGA"`, rail count (u32 LE), then per rail its length (u32 LE) and bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(ADDRESS_MAGIC);
        b.extend_from_slice(&(self.rails.len() as u32).to_le_bytes());
        for a in &self.rails {
            b.extend_from_slice(&(a.len() as u32).to_le_bytes());
            b.extend_from_slice(a);
        }
        b
    }
    /// Parses [`GroupAddress::to_bytes`], checking every length against what is left.
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        let mut rd = Reader::new(b, ADDRESS_MAGIC, "group address")?;
        let n = rd.count()?;
        let mut rails = Vec::with_capacity(n);
        for i in 0..n {
            let len = rd.u32()? as usize;
            if len > MAX_ADDRESS_BYTES || len > rd.rest().len() {
                return Err(Error::Usage(format!(
                    "group address: rail {i} claims a {len}-byte name but {} bytes are left (limit {MAX_ADDRESS_BYTES}); corrupt or from another efabench version",
                    rd.rest().len()
                )));
            }
            rails.push(rd.take(len).to_vec());
        }
        if !rd.rest().is_empty() {
            return Err(Error::Usage(format!(
                "group address: {} bytes left over after {n} rails; corrupt or from another efabench version",
                rd.rest().len()
            )));
        }
        Ok(GroupAddress { rails })
    }
}

pub(super) fn check_count(n: usize, what: &str) -> Result<()> {
    if n == 0 || n > MAX_RAILS {
        return Err(Error::Usage(format!(
            "a {what} must have 1 to {MAX_RAILS} rails, got {n}"
        )));
    }
    Ok(())
}

/// Bounded little-endian reader for the two wire formats above.
struct Reader<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8], magic: &[u8; 4], what: &'static str) -> Result<Self> {
        if b.len() < 8 || &b[..4] != magic {
            return Err(Error::Usage(format!(
                "not a {what} ({} bytes without the {:?} header); peer running another efabench version?",
                b.len(),
                std::str::from_utf8(magic).unwrap_or("?")
            )));
        }
        Ok(Reader { b: &b[4..], what })
    }
    fn u32(&mut self) -> Result<u32> {
        if self.b.len() < 4 {
            return Err(Error::Usage(format!("{} is truncated", self.what)));
        }
        let v = u32::from_le_bytes(self.b[..4].try_into().expect("4 bytes"));
        self.b = &self.b[4..];
        Ok(v)
    }
    fn count(&mut self) -> Result<usize> {
        let n = self.u32()? as usize;
        check_count(n, self.what)?;
        Ok(n)
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (a, rest) = self.b.split_at(n);
        self.b = rest;
        a
    }
    fn rest(&self) -> &'a [u8] {
        self.b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_formats_round_trip_and_are_bounded() {
        let d = RegionDescriptor::new(vec![
            RemoteRegion {
                addr: 1,
                key: 2,
                len: 3,
            },
            RemoteRegion {
                addr: 4,
                key: 5,
                len: 6,
            },
        ])
        .unwrap();
        let b = d.to_bytes();
        assert_eq!(RegionDescriptor::from_bytes(&b).unwrap(), d);
        assert!(RegionDescriptor::from_bytes(&b[..b.len() - 1]).is_err());
        let mut huge = b.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(RegionDescriptor::from_bytes(&huge).is_err());
        assert!(RegionDescriptor::from_bytes(&[]).is_err());

        let a = GroupAddress::new(vec![vec![1, 2, 3], vec![], vec![9; 40]]).unwrap();
        let b = a.to_bytes();
        assert_eq!(GroupAddress::from_bytes(&b).unwrap(), a);
        for cut in 0..b.len() {
            assert!(GroupAddress::from_bytes(&b[..cut]).is_err(), "cut {cut}");
        }
        let mut lie = b.clone();
        lie[8..12].copy_from_slice(&(u32::MAX).to_le_bytes());
        assert!(GroupAddress::from_bytes(&lie).is_err());
        let mut extra = b;
        extra.push(0);
        assert!(GroupAddress::from_bytes(&extra).is_err());
    }
}
