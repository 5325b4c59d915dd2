//! Helpers shared by the fuzz targets: the record framing of packet-stream inputs and a
//! scratch file for the readers that take a path.

use std::path::PathBuf;

/// Splits a fuzz input into packets: each record is a little-endian `u16` length and that
/// many bytes; a last record shorter than its length takes what is left. The seeds
/// (`fuzz/make_seeds.py`) are real packets in this framing.
pub fn records(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while data.len() >= 2 {
        let n = u16::from_le_bytes([data[0], data[1]]) as usize;
        let rest = &data[2..];
        let take = n.min(rest.len());
        out.push(&rest[..take]);
        data = &rest[take..];
    }
    out
}

/// Writes `data` to this process's scratch file (in /dev/shm where it exists) and returns
/// its path: the pcap and npy readers open files.
pub fn scratch_file(name: &str, data: &[u8]) -> PathBuf {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("gpucbf-fuzz-{}-{name}", std::process::id()));
    std::fs::write(&path, data).expect("scratch file");
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_split_on_length_prefixes() {
        let d = [2, 0, b'a', b'b', 0, 0, 5, 0, b'x'];
        assert_eq!(records(&d), vec![&b"ab"[..], &b""[..], &b"x"[..]]);
    }
}

pub mod place;
