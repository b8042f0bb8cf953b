//! What the timing examples (`tap_cost`, `vm_uniform`) share: their frame and their timer.

use std::time::Instant;

use freeway_capture::samples::clean_frames;

/// The first IPv4/UDP frame of the samples (seed 11): the uniform traffic the examples time.
pub fn ipv4_udp_frame() -> Vec<u8> {
    clean_frames(11, 64)
        .into_iter()
        .find(|f| f.len() >= 42 && f[12] == 8 && f[13] == 0 && f[23] == 17)
        .expect("an IPv4/UDP frame")
}

/// The best of `timings` timings of `reps` calls of `f`, in ns per frame (`frames` frames
/// per call).
pub fn ns_per_frame(timings: usize, reps: usize, frames: usize, mut f: impl FnMut()) -> f64 {
    (0..timings)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..reps {
                f();
            }
            t.elapsed().as_nanos() as f64 / (reps * frames) as f64
        })
        .fold(f64::INFINITY, f64::min)
}
