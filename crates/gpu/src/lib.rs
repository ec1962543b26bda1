//! efabench-gpu: the CUDA side of efabench, loaded at run time.
//!
//! Everything CUDA is reached through `cudarc` with dynamic loading and NVML through
//! `nvml-wrapper`, so the crate builds on machines with no CUDA at all and, on a machine without
//! a driver, every call returns [`GpuError::NoDriver`] ("no CUDA driver was found") instead of
//! panicking. It provides:
//!
//! * device discovery ([`Gpu`], [`device_count`], [`device_for_local_rank`]);
//! * buffers of each memory kind ([`alloc`], [`MemKind`], [`GpuBuffer`]) that implement the fabric
//!   layer's [`efabench_fabric::MemoryBuffer`], so libfabric can register them (`FI_HMEM_CUDA`,
//!   or a dmabuf where the driver exports one);
//! * CUDA C kernels from `crates/gpu/kernels/`, compiled with NVRTC for the device's own
//!   architecture and cached ([`kernels`]);
//! * streams, CUDA-event timing and kernel launches ([`Stream`], [`Event`], [`Kernel`]);
//! * CUDA IPC handles ([`ipc`]) for `efabench ipc`, and the NVML inventory ([`nvml`]);
//! * the GPU->CPU command rings of `efabench queue` ([`queue`], with GDRCopy in [`gdr`]);
//! * the command rings and put kernels of `efabench proxy` ([`proxy`]), and the dispatch,
//!   signal and combine kernels of `efabench ep` ([`ep`]);
//! * the memory both rings live in (`mapped`: pinned, managed, or device memory through a
//!   GDRCopy mapping), shared by the two.

pub mod affinity;
pub mod buffer;
pub mod driver;
pub mod ep;
pub mod error;
pub mod gdr;
pub mod h2d;
pub mod health;
pub mod ipc;
pub mod kernels;
mod mapped;
pub mod nvml;
pub mod proxy;
pub mod queue;

/// The verification pattern, compiled from the benchmarks' own source file so the host side of
/// this crate and the benchmarks can never disagree (the device copy is `kernels/pattern.cuh`).
#[path = "../../bench/src/pattern.rs"]
pub mod pattern;

pub use buffer::{
    alloc, alloc_registered, DeviceBuffer, GpuBuffer, HostBuffer, ManagedBuffer, MemKind,
    PinnedBuffer, RegisteredBuffer,
};
pub use driver::{
    device_count, driver, Event, Gpu, Kernel, KernelParams, Shape, Stream, TypedKernel,
};
pub use error::GpuError;

/// What `--gpu` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuChoice {
    /// One GPU per local rank: local rank modulo the number of GPUs.
    Auto,
    /// This ordinal.
    Index(i32),
}

impl std::str::FromStr for GpuChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("auto") {
            return Ok(GpuChoice::Auto);
        }
        t.parse::<i32>()
            .ok()
            .filter(|v| *v >= 0)
            .map(GpuChoice::Index)
            .ok_or_else(|| format!("invalid --gpu {s:?}: use a GPU index (0, 1, ...) or auto"))
    }
}

/// The GPU of local rank `local_rank` when there are `count` GPUs (round robin).
pub fn pick_device(local_rank: u32, count: i32) -> Result<i32, GpuError> {
    if count <= 0 {
        return Err(GpuError::Invalid(
            "the CUDA driver sees no GPU: check nvidia-smi and CUDA_VISIBLE_DEVICES".to_string(),
        ));
    }
    Ok((local_rank % count as u32) as i32)
}

/// The GPU this local rank should use (`--gpu auto`).
pub fn device_for_local_rank(local_rank: u32) -> Result<i32, GpuError> {
    pick_device(local_rank, device_count()?)
}

/// Resolves a `--gpu` choice for this local rank, checking that the ordinal exists.
pub fn resolve(choice: GpuChoice, local_rank: u32) -> Result<i32, GpuError> {
    match choice {
        GpuChoice::Auto => device_for_local_rank(local_rank),
        GpuChoice::Index(i) => {
            let n = device_count()?;
            if i >= n {
                Err(GpuError::Invalid(format!(
                    "--gpu {i} does not exist: this machine has {n} GPU(s); use 0..{} or auto",
                    n.max(1) - 1
                )))
            } else {
                Ok(i)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_choice_parses() {
        assert_eq!("auto".parse::<GpuChoice>(), Ok(GpuChoice::Auto));
        assert_eq!("3".parse::<GpuChoice>(), Ok(GpuChoice::Index(3)));
        let e = "-1".parse::<GpuChoice>().unwrap_err();
        assert!(e.contains("auto"), "{e}");
        assert!("x".parse::<GpuChoice>().is_err());
    }

    #[test]
    fn local_ranks_round_robin() {
        assert_eq!(pick_device(0, 8), Ok(0));
        assert_eq!(pick_device(9, 8), Ok(1));
        assert!(pick_device(0, 0).is_err());
    }

    #[test]
    fn mem_kind_names_are_their_command_line_spellings() {
        use clap::ValueEnum;
        let names: Vec<String> = MemKind::value_variants()
            .iter()
            .map(|k| k.to_possible_value().unwrap().get_name().to_string())
            .collect();
        assert_eq!(names, MemKind::ALL.map(MemKind::name));
        assert_eq!(MemKind::from_str("cuda", false), Ok(MemKind::Cuda));
        assert!(MemKind::from_str("CUDA", false).is_err());
        assert!(MemKind::from_str("gpu", false).is_err());
    }

    #[test]
    fn host_buffers_need_no_driver_and_check_the_pattern() {
        let mut b = alloc(MemKind::Host, 4099, 0).expect("host alloc");
        assert_eq!(b.len(), 4099);
        assert_eq!(b.as_ptr() as usize % 4096, 0, "page aligned");
        assert_eq!(b.hmem(), efabench_fabric::Hmem::System);
        assert!(
            b.mismatches(7).expect("check") > 0,
            "zeroed buffer is not the pattern"
        );
        b.fill_pattern(7).expect("fill");
        assert_eq!(b.mismatches(7), Ok(0));
        assert_eq!(b.mismatches(8), Ok(513));
        assert!(alloc(MemKind::Host, 0, 0).is_err());
    }

    #[test]
    fn without_a_driver_every_gpu_call_says_so() {
        // SAFETY: only probes whether the library can be dlopened.
        if unsafe { cudarc::driver::sys::is_culib_present() } {
            println!("skipped: a CUDA driver is present (this test is for machines without one)");
            return;
        }
        for k in [MemKind::Pinned, MemKind::Cuda, MemKind::Managed] {
            let e = alloc(k, 4096, 0).err().expect("must fail without a driver");
            assert!(e.is_no_driver(), "{e}");
            assert!(e.to_string().contains("no CUDA driver was found"), "{e}");
        }
        assert!(device_count().unwrap_err().is_no_driver());
        assert!(Gpu::open(0).unwrap_err().is_no_driver());
        assert!(device_for_local_rank(0).unwrap_err().is_no_driver());
        assert!(alloc_registered(4096, 0).err().map(|e| e.is_no_driver()) == Some(true));
    }
}
