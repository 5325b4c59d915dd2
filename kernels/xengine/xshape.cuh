// gpucbf: the X-engine shape every X-engine kernel is compiled for (NVRTC -D defines), and the
// integer types they share. Prepended to correlate.cu, correlate_wgmma.cu, beamform.cu and
// beamform_wgmma.cu on the host.
#ifndef N_ANTS
#error "N_ANTS must be defined"
#endif
#ifndef N_CHANNELS
#error "N_CHANNELS must be defined"
#endif
#ifndef SPECTRA
#error "SPECTRA must be defined"
#endif
typedef unsigned int u32;
typedef unsigned long long u64;
