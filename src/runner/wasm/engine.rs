//! The one wasmtime engine every wasm plugin runs on: pooling allocator, fuel
//! metering, epoch interruption, and the ticker thread that advances the epoch
//! every [`TICK`] (what makes a deadline fire).
//!
//! Owns only the engine's configuration and its ticker. Never compiles,
//! links or runs a plugin, and never holds per-plugin or per-call state.

use std::sync::OnceLock;
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// One epoch tick.
pub(super) const TICK: Duration = Duration::from_millis(1);

/// Bytes of each pooled memory and table reset by `memset` rather than
/// `madvise`: a fresh instance then faults in no pages for its stack and
/// first heap pages, and no TLB shootdown follows each call.
const KEEP_RESIDENT: usize = 256 << 10;

/// An engine configured as the shared one, but with fuel metering on or off
/// and no epoch ticker (deadlines never fire): for measuring what fuel costs.
#[doc(hidden)]
pub fn bench_engine(fuel: bool) -> Engine {
    let mut config = Config::new();
    config.consume_fuel(fuel).epoch_interruption(true);
    Engine::new(&config).unwrap_or_else(|e| panic!("bench engine: {e}"))
}

/// The process-wide engine, with its epoch ticker.
pub fn engine() -> Result<&'static Engine, String> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut pool = PoolingAllocationConfig::default();
            pool.total_component_instances(256).total_memories(256).total_tables(256).max_memory_size(1 << 30);
            pool.linear_memory_keep_resident(KEEP_RESIDENT).table_keep_resident(KEEP_RESIDENT);
            let mut config = Config::new();
            config.consume_fuel(true).epoch_interruption(true);
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
            let engine = Engine::new(&config).map_err(|e| format!("cannot start the wasm engine: {e}"))?;
            let ticking = engine.clone();
            std::thread::Builder::new()
                .name("ctxhost-epoch".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(TICK);
                        ticking.increment_epoch();
                    }
                })
                .map_err(|e| format!("cannot start the epoch ticker: {e}"))?;
            Ok(engine)
        })
        .as_ref()
        .map_err(Clone::clone)
}
