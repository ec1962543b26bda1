//! Prints JSONL records the way a benchmark prints them while it runs, e.g. to see a results
//! file as the nccl-tests-style table again:
//! `cargo run -p efabench-report --example show -- results.jsonl [table|json|csv]`.

use efabench_report::{read_records, Format, Sink};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: show RESULTS.jsonl [table|json|csv]");
        std::process::exit(2);
    };
    let format: Format = match args.get(1).map(|s| s.parse()).unwrap_or(Ok(Format::Table)) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("show: {e}");
            std::process::exit(2);
        }
    };
    let result = read_records(path).and_then(|records| {
        let mut sink = Sink::stdout(format);
        for r in &records {
            sink.push(r)?;
        }
        sink.finish().map(|_| ())
    });
    if let Err(e) = result {
        eprintln!("show: {e}");
        std::process::exit(2);
    }
}
