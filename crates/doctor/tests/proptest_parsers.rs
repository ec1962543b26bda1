//! Property tests: the text parsers of `doctor` (an NCCL debug log given with `--nccl-log`, the
//! `Max locked memory` line of `/proc/<pid>/limits`) never panic on any text, and their
//! one-line checks stay one line. Bounded cases (`PROPTEST_CASES` overrides).

use efabench_doctor::{memlock_from_limits, nccl_log};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn nccl_log_parser_never_panics(
        lines in proptest::collection::vec(
            prop_oneof![
                any::<String>(),
                "NCCL INFO [ -~]{0,40}",
                "[ -~]{0,10}Initializing aws-ofi-nccl [ -~]{0,12}",
                "[ -~]{0,10}(Selected|selected) (P|p)rovider is [ -~]{0,12}",
                "[ -~]{0,10}(NET/OFI|NET/Socket|via NET/[A-Za-z]{0,8}|GDRDMA|NVLS)[ -~]{0,20}",
            ],
            0..30,
        )
    ) {
        let text = lines.join("\n");
        let _ = nccl_log::parse(&text);
        let c = nccl_log::check("log.txt", &text);
        let j = serde_json::to_string(&c).unwrap();
        prop_assert!(!j.is_empty());
    }

    #[test]
    fn limits_parser_never_panics(
        text in any::<String>(),
        value in prop_oneof!["[0-9]{0,30}", Just("unlimited".to_string()), any::<String>()],
    ) {
        let _ = memlock_from_limits(&text);
        let line = format!("Max locked memory         {value}  {value}  bytes\n");
        let _ = memlock_from_limits(&line);
    }
}
