//! The `gatehouse` command; everything it does lives in the library (`gatehouse::cli`).

fn main() -> std::process::ExitCode {
    gatehouse::cli::run()
}
