//! Command-line helpers shared by the engines: `key=value,...` output specs
//! (`--wideband`, `--narrowband`, `--corrprod`, `--beam`) and the `--backend auto|cpu|gpu`
//! choice.

/// Splits `key=value,key=value`. Items without `=` continue the previous value when its key
/// is one of `list_keys` (an endpoint list: `dst=a:1,b:2`); elsewhere they are an error.
pub fn parse_kv(spec: &str, list_keys: &[&str]) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for part in spec.split(',') {
        match part.split_once('=') {
            Some((k, v)) => out.push((k.trim().to_string(), v.trim().to_string())),
            None => match out.last_mut() {
                Some((k, v)) if list_keys.contains(&k.as_str()) => {
                    v.push(',');
                    v.push_str(part.trim());
                }
                _ => return Err(format!("expected key=value, got {part:?}")),
            },
        }
    }
    Ok(out)
}

/// Parses a number, accepting float notation for integers too (`channels=4096.0`, `1e3`).
pub fn parse_num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, String> {
    v.parse::<T>().or_else(|_| {
        let f: f64 = v.parse().map_err(|_| format!("{k}={v}: not a number"))?;
        if f.fract() != 0.0 {
            return Err(format!("{k}={v}: not an integer"));
        }
        format!("{}", f as i128)
            .parse::<T>()
            .map_err(|_| format!("{k}={v}: out of range"))
    })
}

/// Parses `uniform` / `none` (the `dither=` key).
pub fn parse_dither(v: &str) -> Result<bool, String> {
    match v {
        "uniform" => Ok(true),
        "none" => Ok(false),
        _ => Err(format!("dither={v}: expected uniform or none")),
    }
}

/// `--backend auto|cpu|gpu`, resolved: true for the GPU backend. `gpu_supported` says whether
/// the GPU backend handles this configuration at all (auto falls back to the CPU when it does
/// not or when no GPU exists; an explicit `gpu` without a GPU is a clear error).
pub fn use_gpu(backend: &str, gpu_supported: bool) -> anyhow::Result<bool> {
    match backend {
        "cpu" => Ok(false),
        "gpu" => {
            if !crate::gpu::gpu_available() {
                anyhow::bail!(
                    "--backend gpu: no usable CUDA device found (use --backend cpu or auto)"
                );
            }
            Ok(true)
        }
        "auto" => Ok(gpu_supported && crate::gpu::gpu_available()),
        other => anyhow::bail!("--backend {other}: expected auto, cpu or gpu"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_lists_numbers_and_backends() {
        let kv = parse_kv("name=wb, dst=1.2.3.4:1,5.6.7.8:2,taps=4", &["dst"]).unwrap();
        assert_eq!(kv[1], ("dst".into(), "1.2.3.4:1,5.6.7.8:2".into()));
        assert_eq!(kv[2], ("taps".into(), "4".into()));
        assert!(parse_kv("name=wb,dst=1.2.3.4:1,5.6.7.8:2", &[]).is_err());
        assert!(parse_kv("oops", &["dst"]).is_err());
        assert_eq!(parse_num::<usize>("c", "4096.0"), Ok(4096));
        assert_eq!(parse_num::<usize>("c", "1e3"), Ok(1000));
        assert!(parse_num::<usize>("c", "2.5").is_err());
        assert!(parse_num::<usize>("c", "-1").is_err());
        assert!(parse_num::<u8>("c", "300").is_err());
        assert_eq!(parse_dither("none"), Ok(false));
        assert!(parse_dither("gaussian").is_err());
        assert!(!use_gpu("cpu", true).unwrap());
        assert!(!use_gpu("auto", false).unwrap());
        assert_eq!(use_gpu("auto", true).unwrap(), crate::gpu::gpu_available());
        assert_eq!(use_gpu("gpu", true).is_ok(), crate::gpu::gpu_available());
        let e = use_gpu("tpu", true).unwrap_err().to_string();
        assert!(e.contains("expected auto, cpu or gpu"), "{e}");
    }
}
