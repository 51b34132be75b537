use clap::Parser;

/// The same allocator as the gateway's binary, for the load generator and for the local
/// stack's services (which this binary runs as `loadtest component`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    loadtest::cli::main(loadtest::cli::Cli::parse())
}
