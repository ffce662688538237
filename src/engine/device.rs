//! The one place that picks the compute device and the CPU thread count.

use candle_core::Device;

/// Sets candle's CPU thread count. candle reads it once, at its first parallel operation,
/// so this runs before any model is loaded. Its own default counts physical cores, which
/// on many VMs is half of the vCPUs actually available.
pub fn configure_threads(threads: usize) {
    let threads = threads.max(1).to_string();
    // SAFETY: called at engine start, before any worker thread that reads the environment.
    unsafe {
        std::env::set_var("RAYON_NUM_THREADS", &threads);
        std::env::set_var("CANDLE_NUM_THREADS", &threads);
    }
}

/// The threads candle will use.
pub fn threads() -> usize {
    candle_core::utils::get_num_threads()
}

/// CUDA when built with the `cuda` feature and a GPU is present, else the CPU.
pub fn select() -> Device {
    #[cfg(feature = "cuda")]
    if let Ok(device) = Device::new_cuda(0) {
        return device;
    }
    Device::Cpu
}
