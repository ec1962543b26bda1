//! Producer shapes of `efabench queue --producers`: blocks x threads, where blocks may be the
//! GPU's SM count (`SMx1024`), resolved to a launch shape once the GPU is known.

use std::fmt;
use std::str::FromStr;

use efabench_gpu::Shape;

/// Blocks of a producer shape: a number, or the device's SM count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Blocks {
    Sm,
    Count(u32),
}

/// Producers: blocks x threads (`1x32`, `SMx1024`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProducerShape {
    pub blocks: Blocks,
    pub threads: u32,
}

impl ProducerShape {
    /// The default sweep of producer shapes (blocks x threads): one thread, one warp, one block,
    /// eight blocks, one block per SM, one 1024-thread block per SM.
    pub const DEFAULT_LIST: &'static str = "1x1,1x32,1x256,8x256,SMx256,SMx1024";

    /// One block of one thread.
    pub fn one() -> Self {
        ProducerShape {
            blocks: Blocks::Count(1),
            threads: 1,
        }
    }

    /// The launch shape on a GPU with `sm_count` multiprocessors.
    pub fn resolve(self, sm_count: u32) -> Shape {
        Shape {
            grid: match self.blocks {
                Blocks::Sm => sm_count.max(1),
                Blocks::Count(n) => n,
            },
            block: self.threads,
        }
    }

    /// Parses a comma-separated list.
    pub fn parse_list(s: &str) -> Result<Vec<ProducerShape>, String> {
        let v: Result<Vec<_>, _> = s
            .split(',')
            .filter(|t| !t.trim().is_empty())
            .map(str::parse)
            .collect();
        let v = v?;
        if v.is_empty() {
            return Err(format!(
                "--producers is empty: give blocks x threads, e.g. {}",
                Self::DEFAULT_LIST
            ));
        }
        Ok(v)
    }
}

impl fmt::Display for ProducerShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.blocks {
            Blocks::Sm => write!(f, "SMx{}", self.threads),
            Blocks::Count(n) => write!(f, "{n}x{}", self.threads),
        }
    }
}

impl FromStr for ProducerShape {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let bad = || {
            format!(
                "invalid producer shape {t:?}: use BLOCKSxTHREADS with BLOCKS 1..65535 or SM and \
                 THREADS 1..1024, e.g. 1x32 or SMx1024"
            )
        };
        let (b, th) = t.split_once(['x', 'X']).ok_or_else(bad)?;
        let blocks = if b.eq_ignore_ascii_case("sm") {
            Blocks::Sm
        } else {
            match b.parse::<u32>() {
                Ok(n) if (1..=65535).contains(&n) => Blocks::Count(n),
                _ => return Err(bad()),
            }
        };
        let threads = match th.parse::<u32>() {
            Ok(n) if (1..=1024).contains(&n) => n,
            _ => return Err(bad()),
        };
        Ok(ProducerShape { blocks, threads })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_resolve_and_print() {
        let v = ProducerShape::parse_list(ProducerShape::DEFAULT_LIST).unwrap();
        assert_eq!(v.len(), 6);
        assert_eq!(
            v[5].resolve(132),
            Shape {
                grid: 132,
                block: 1024
            }
        );
        assert_eq!(v[0].to_string(), "1x1");
        assert_eq!(v[4].to_string(), "SMx256");
        for bad in ["0x32", "1x0", "1x2048", "x32", "smx", "32"] {
            assert!(bad.parse::<ProducerShape>().is_err(), "{bad}");
        }
        assert!(ProducerShape::parse_list(",").is_err());
    }
}
