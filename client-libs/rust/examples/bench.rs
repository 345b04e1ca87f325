//! The Rust client's benchmark (run by bench.sh through client-libs/conformance/bench_language.py,
//! beside the C library's in the same run):
//! `bench CACHE_DIR LEGACY_DIR EXTENDED_DIR HOST PORT FP N_CACHE N_RT`; one JSON line per
//! measurement (the local-cache hit, legacy and extended round trips to the real notary).
use converge::Client;
use std::path::Path;
use std::time::Instant;

fn summary(name: &str, mut us: Vec<f64>) -> String {
    us.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| us[((p * us.len() as f64) as usize).min(us.len() - 1)];
    let mean = us.iter().sum::<f64>() / us.len() as f64;
    let r = |x: f64| (x * 10.0).round() / 10.0;
    format!(
        r#"{{"measurement": "{name}", "n": {}, "p50_us": {}, "p99_us": {}, "mean_us": {}}}"#,
        us.len(),
        r(q(0.5)),
        r(q(0.99)),
        r(mean)
    )
}

fn timed(n: usize, mut f: impl FnMut()) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    assert_eq!(a.len(), 8, "usage: bench CACHE_DIR LEGACY_DIR EXTENDED_DIR HOST PORT FP N_CACHE N_RT");
    let (host, port, fp) = (&a[3], a[4].parse::<u16>().unwrap(), &a[5]);
    let (n_cache, n_rt): (usize, usize) = (a[6].parse().unwrap(), a[7].parse().unwrap());
    let cached = Client::load(Some(Path::new(&a[0]))).unwrap();
    assert!(cached.check(host, port, fp).unwrap().trusted, "the notary does not confirm the target");
    timed(n_cache.min(1000), || drop(cached.check(host, port, fp).unwrap()));
    let hits = timed(n_cache, || assert!(cached.check(host, port, fp).unwrap().from_cache));
    println!("{}", summary("cache hit", hits));
    for (name, dir) in [("round trip, legacy", &a[1]), ("round trip, extended", &a[2])] {
        let c = Client::load(Some(Path::new(dir))).unwrap();
        timed(10, || drop(c.check(host, port, fp).unwrap()));
        let rts = timed(n_rt, || {
            let v = c.check(host, port, fp).unwrap();
            assert!(v.trusted && !v.from_cache, "{}", v.reason);
        });
        println!("{}", summary(name, rts));
    }
}
