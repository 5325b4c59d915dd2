//! dsim `--interface` with several interfaces: each stream's destinations are divided among
//! them in contiguous blocks, each block sent from its own interface's address; a count
//! the interfaces cannot share is refused by name.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use clap::Parser;
use gpucbf::engines::dsim::DsimArgs;

#[derive(Parser)]
struct D {
    #[command(flatten)]
    a: DsimArgs,
}

fn args(interfaces: &str, dests: &[String]) -> DsimArgs {
    let mut v: Vec<String> = [
        "dsim",
        "--adc-sample-rate",
        "1712e6",
        "--period",
        "65536",
        "--heaps",
        "8",
        "--katcp-port",
        "0",
        "--descriptor-interval",
        "0",
        "--interface",
        interfaces,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(dests.iter().cloned());
    D::try_parse_from(v).unwrap().a
}

#[test]
fn each_block_of_destinations_leaves_from_its_interface() {
    // Two streams (pols), each with two destinations: 127.0.0.1 and 127.0.0.2 on its port.
    let (one, two) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
    let mut rx = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..20 {
        if ports.len() == 2 {
            break;
        }
        let b = UdpSocket::bind((two, 0)).unwrap();
        let p = b.local_addr().unwrap().port();
        // The same port on 127.0.0.1 (taken there by chance: try another).
        let Ok(a) = UdpSocket::bind((one, p)) else {
            continue;
        };
        for s in [&a, &b] {
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
        }
        rx.push((one, a));
        rx.push((two, b));
        ports.push(p);
    }
    assert_eq!(ports.len(), 2);
    let dests: Vec<String> = ports.iter().map(|p| format!("127.0.0.1+1:{p}")).collect();
    let cfg = args("127.0.0.1,127.0.0.2", &dests).validate().unwrap();
    gpucbf::engines::dsim::run(&cfg).unwrap();
    for (ip, s) in &rx {
        let mut buf = vec![0u8; 9000];
        let mut n = 0;
        while let Ok((_, from)) = s.recv_from(&mut buf) {
            // Destination x.x.x.1 is the first block (interface 127.0.0.1), x.x.x.2 the
            // second (127.0.0.2).
            let SocketAddr::V4(from) = from else {
                panic!("{from}")
            };
            assert_eq!(from.ip(), ip, "a packet to {ip} left from {from}");
            n += 1;
        }
        // 8 heaps per stream, round-robin over its two destinations: at least 4 each.
        assert!(n >= 4, "{n} packets reached {ip}");
    }
}

#[test]
fn interfaces_that_cannot_share_a_stream_are_refused() {
    let dests = [
        "127.0.0.1+1:7148".to_string(),
        "127.0.0.1+1:7150".to_string(),
    ];
    let e = args("127.0.0.1,127.0.0.2,127.0.0.3", &dests)
        .validate()
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("--interface") && e.contains("3 interfaces"),
        "{e}"
    );
    assert!(args("127.0.0.1,127.0.0.2", &dests).validate().is_ok());
}
