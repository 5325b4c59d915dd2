//! Design of the F-engine's fixed inputs: PFB FIR weights (windowed sinc), the DDC's
//! Parks–McClellan low-pass filter, and the linear delay model evaluated per spectrum.

pub(crate) mod delay;
pub(crate) mod remez;
pub(crate) mod weights;
