//! The `gatehouse` command; everything it does lives in the library (`gatehouse::cli`).

/// A proxy allocates and frees small buffers per request from every worker thread; mimalloc's
/// thread-local free lists cost far less than glibc malloc's arenas here (a quarter of the
/// gateway's CPU under load was malloc/free before; see the README's performance section).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    gatehouse::cli::run()
}
