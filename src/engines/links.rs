//! The names katsdpcontroller runs: `fgpu`, `xbgpu`, `dsim` (links to the `gpucbf` binary,
//! which dispatches on its program name) and `schedrr` (katgpucbf's image runs the engines
//! through it to give their threads the SCHED_RR real-time policy). `tools/install-links.sh`
//! makes the links beside an installed `gpucbf`.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

/// Program names that select a `gpucbf` subcommand.
pub const LINKS: [&str; 4] = ["fgpu", "xbgpu", "dsim", "schedrr"];

/// katsdpdockerbase's `schedrr`: sets SCHED_RR at priority 1 for this process, drops an
/// effective uid to the real one (for a setuid install), then execs `command[0]` (found on
/// PATH) with `command` as its arguments. Any failure is printed with its cause and exits
/// with status 1, as upstream's; never returns.
pub fn schedrr(command: &[OsString]) -> ! {
    let fail = |what: &str, e: std::io::Error| -> ! {
        eprintln!("{what} failed: {e}");
        std::process::exit(1)
    };
    if command.is_empty() {
        eprintln!("Usage: schedrr program [args]");
        std::process::exit(2)
    }
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: plain system calls on this process with a valid parameter block.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_RR, &param) } != 0 {
        fail("sched_setscheduler", std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::seteuid(libc::getuid()) } != 0 {
        fail("seteuid", std::io::Error::last_os_error());
    }
    let to_c = |a: &OsString| CString::new(a.as_bytes()).ok();
    let Some(args) = command.iter().map(to_c).collect::<Option<Vec<CString>>>() else {
        eprintln!("execvp failed: an argument contains a NUL byte");
        std::process::exit(1)
    };
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: argv is a NULL-terminated array of NUL-terminated strings that outlive the call.
    unsafe { libc::execvp(argv[0], argv.as_ptr()) };
    fail("execvp", std::io::Error::last_os_error())
}
