//! Kernel timing with CUDA events.

/// Seconds per call of `f` over `reps` calls (after one warm-up call), timed with CUDA
/// events on `stream`; `err` maps driver errors into the caller's error type.
pub fn time_on_stream<E>(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    reps: usize,
    mut f: impl FnMut() -> Result<(), E>,
    err: impl Fn(cudarc::driver::DriverError) -> E,
) -> Result<f64, E> {
    use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
    f()?;
    let start = stream.record_event(Some(CU_EVENT_DEFAULT)).map_err(&err)?;
    for _ in 0..reps {
        f()?;
    }
    let end = stream.record_event(Some(CU_EVENT_DEFAULT)).map_err(&err)?;
    let ms = start.elapsed_ms(&end).map_err(&err)?;
    Ok(ms as f64 * 1e-3 / reps.max(1) as f64)
}
