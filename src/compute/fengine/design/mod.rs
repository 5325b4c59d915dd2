//! Design of the F-engine's fixed inputs: PFB FIR weights (windowed sinc), the DDC's
//! Parks–McClellan low-pass filter, and the linear delay model evaluated per spectrum.

pub(super) mod delay;
pub(super) mod remez;
pub(super) mod weights;
