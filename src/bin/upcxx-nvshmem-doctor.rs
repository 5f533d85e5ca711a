//! upcxx-nvshmem-doctor (placeholder until the report engine lands)
fn main() {
    println!("upcxx-nvshmem-doctor {}", env!("CARGO_PKG_VERSION"));
}
