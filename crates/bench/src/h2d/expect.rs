//! What a host↔GPU copy can reach over the GPU's PCIe link.
//!
//! The raw rate is generation × width × line-code efficiency (128b/130b from Gen3): Gen5 x16
//! carries 63.0 GB/s per direction. Copies see less: every 256-byte (at most, often 128 or
//! 512) TLP of data carries about 24 bytes of header, sequence number, LCRC and framing, and flow
//! control and acknowledgement packets share the link. [`PRACTICAL_EFFICIENCY`] is the fraction of
//! the raw rate a healthy link delivers to a copy; a figure well below it on a link at full
//! speed and width is a finding (placement, IOMMU, a throttled GPU or a bad link).

use efabench_topology::pcie::{generation, link_gbytes_per_s, PcieLink};
use serde::Serialize;

/// Fraction of the raw link rate a large copy reaches on a healthy link. Measured: 64 MiB
/// copy-engine copies on an H200 (Gen5 x16, 63.0 GB/s raw) moved 55.1-55.4 GB/s each way, 0.875-
/// 0.879 of the raw rate, in four runs beside PyTorch's CUDA-event copies (55.2-55.4 GB/s);
/// 256-byte payloads behind ~24 bytes of TLP overhead cap a copy near 0.91 before flow control
/// and acknowledgements. 0.87 keeps a healthy link at or above 100%. (Azure's health checks
/// expect 52 GB/s on H100 v5, 0.83: a looser line.)
pub const PRACTICAL_EFFICIENCY: f64 = 0.87;

/// A figure below this fraction of [`Expectation::expected_gbytes`] is flagged.
pub const FLAG_BELOW: f64 = 0.9;

/// The link a GPU's copies cross and what they should reach over it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Expectation {
    /// `Gen5 x16 (32.0 GT/s)`: the link at its maximum.
    pub link: String,
    /// The link as trained now, when it is below its maximum (`16.0 GT/s x8`).
    pub trained_below: Option<String>,
    /// Raw data rate per direction at the maximum, GB/s.
    pub raw_gbytes: f64,
    /// `raw_gbytes` × [`PRACTICAL_EFFICIENCY`].
    pub expected_gbytes: f64,
}

impl Expectation {
    /// From the GPU's sysfs link; `None` when it shows no maximum speed and width.
    pub fn of(link: &PcieLink) -> Option<Expectation> {
        let (gts, width) = (link.max_gts?, link.max_width?);
        let raw = link_gbytes_per_s(gts, width);
        let gen = generation(gts).map_or(format!("{gts:.1} GT/s"), |g| format!("Gen{g}"));
        Some(Expectation {
            link: format!("{gen} x{width} ({gts:.1} GT/s)"),
            trained_below: (link.speed_below_max() || link.width_below_max())
                .then(|| link.current_text()),
            raw_gbytes: raw,
            expected_gbytes: raw * PRACTICAL_EFFICIENCY,
        })
    }

    /// `measured / expected` for one direction; `directions` = 2 for both at once (the link is
    /// full duplex: each direction has its own raw rate).
    pub fn fraction(&self, measured_gbytes: f64, directions: u32) -> f64 {
        measured_gbytes / (self.expected_gbytes * f64::from(directions.max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(cur: (f64, u32), max: (f64, u32)) -> PcieLink {
        PcieLink {
            current_gts: Some(cur.0),
            current_width: Some(cur.1),
            max_gts: Some(max.0),
            max_width: Some(max.1),
        }
    }

    #[test]
    fn gen5_x16_expects_about_55_gbytes() {
        let e = Expectation::of(&link((32.0, 16), (32.0, 16))).unwrap();
        assert_eq!(e.link, "Gen5 x16 (32.0 GT/s)");
        assert!((e.raw_gbytes - 63.015).abs() < 0.01, "{e:?}");
        assert!((e.expected_gbytes - 54.82).abs() < 0.01, "{e:?}");
        assert_eq!(e.trained_below, None);
        // Both directions at once: each has the full rate.
        assert!((e.fraction(2.0 * 54.82, 2) - 1.0).abs() < 0.001);
        assert!((e.fraction(27.41, 1) - 0.5).abs() < 0.001);
    }

    #[test]
    fn a_degraded_link_is_named_and_judged_against_its_maximum() {
        let e = Expectation::of(&link((16.0, 8), (32.0, 16))).unwrap();
        assert_eq!(e.trained_below.as_deref(), Some("16.0 GT/s x8"));
        // Gen4 x16: 31.5 GB/s raw.
        let g4 = Expectation::of(&link((16.0, 16), (16.0, 16))).unwrap();
        assert!((g4.raw_gbytes - 31.508).abs() < 0.01);
        assert_eq!(g4.link, "Gen4 x16 (16.0 GT/s)");
        let none = PcieLink {
            current_gts: Some(32.0),
            current_width: None,
            max_gts: Some(32.0),
            max_width: None,
        };
        assert!(Expectation::of(&none).is_none());
    }
}
