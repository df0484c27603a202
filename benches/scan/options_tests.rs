//! The scan example's command line: what parses, what is refused, and the children's
//! arguments.

use super::*;

fn parse(args: &[&str]) -> Result<Options, String> {
    let args = std::iter::once("scan").chain(args.iter().copied());
    let opts = Options::try_parse_from(args).map_err(|e| e.to_string())?;
    opts.validate()?;
    Ok(opts)
}

fn parse_child(args: Vec<OsString>) -> Options {
    let args = std::iter::once(OsString::from("scan")).chain(args);
    Options::try_parse_from(args).expect("the child's arguments parse")
}

#[test]
fn options_that_need_each_other_are_checked() {
    for (args, want) in [
        (&["--fio"][..], "--fio needs --compare"),
        (
            &["--backend", "std", "--rounds", "2"],
            "--rounds needs --compare",
        ),
        (&["--json", "--rounds", "2"], "or the default run"),
        (&["--records", "--hash"], "give one"),
        (
            &["--records", "--consumer", "light"],
            "--records is a consumer of its own",
        ),
        (
            &["--hash", "--consumer", "light"],
            "--hash is --consumer blake3",
        ),
        (&["--consumer", "fast"], "use light, checksum, blake3"),
        (&["--consumer", "records"], "unknown consumer"),
        (&["--threads", "0"], "'--threads <N>': '0' is not a count"),
        (
            &["--compare", "--backend", "std"],
            "--compare and --turns run std themselves",
        ),
        (
            &["--turns", "3", "--compare"],
            "--turns runs warm in this process",
        ),
        (
            &["--turns", "3", "--drop-caches"],
            "--turns runs warm in this process",
        ),
        (&["--turns", "0"], "1 or more"),
        (&["--evict", "3"], "--evict needs --compare"),
        (
            &["--compare", "--evict", "3", "--drop-caches"],
            "--evict needs --compare",
        ),
        (&["--data-set", "tiny", "/tmp"], "exclude each other"),
        (&["--compare", "--rounds", "0"], "1 or more"),
        (&["--data-set", "huge"], "mixed, mixed-1g, tiny, tiny-100k"),
    ] {
        let err = parse(args).unwrap_err();
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let opts = parse(&["--compare", "--fio", "--rounds=5", "--data-set=tiny"]).unwrap();
    assert!(opts.compare && opts.fio);
    assert_eq!(opts.rounds, Some(5));
    assert_eq!(opts.generated().map(|set| set.name), Some("tiny"));
    let opts = parse(&["--rounds", "4", "--records", "--threads=2"]).unwrap();
    assert!(opts.cold_and_warm() && opts.records);
    assert_eq!((opts.rounds, opts.threads), (Some(4), 2));
    assert_eq!(opts.consumer(), Consumer::Records);
    let opts = parse(&["--turns", "21", "--runner", "reader"]).unwrap();
    assert!(!opts.cold_and_warm() && opts.turns == Some(21));
}

#[test]
fn the_consumer_is_checksum_unless_named_and_hash_is_blake3() {
    for (args, want) in [
        (&[][..], Consumer::Checksum),
        (&["--consumer", "light"], Consumer::Light),
        (&["--consumer=checksum"], Consumer::Checksum),
        (&["--consumer", "blake3"], Consumer::Blake3),
        (&["--hash"], Consumer::Blake3),
        (&["--hash", "--consumer", "blake3"], Consumer::Blake3),
        (&["--records"], Consumer::Records),
    ] {
        let opts = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_eq!(opts.consumer(), want, "{args:?}");
        assert!(opts.settings().contains(want.name()), "{args:?}");
    }
}

#[test]
fn a_child_gets_the_same_options_and_one_backend() {
    let parent = parse(&[
        "--compare",
        "--direct",
        "--offload",
        "--uncached",
        "--uncached-fallback",
        "--hash",
        "--drop-caches",
        "--buffer-size",
        "8M",
        "--read-size=128K",
        "--backend",
        "uring",
        "--",
        "-odd",
        "/tmp/a",
    ])
    .unwrap();
    let args = child_args(&parent, parent.ours());
    let child = parse_child(args);
    assert_eq!(child.backend, Some(Runner::Ours(Backend::IoUring)));
    assert!(child.json && !child.compare && !child.fio);
    assert!(child.direct && child.drop_caches && child.offload && child.uncached);
    assert!(child.uncached_fallback);
    assert_eq!(child.consumer(), Consumer::Blake3);
    assert_eq!(child.buffer_size, 8 << 20);
    assert_eq!(child.read_size, 128 << 10);
    assert_eq!(
        child.paths,
        [PathBuf::from("-odd"), PathBuf::from("/tmp/a")]
    );
    let std = child_args(&parent, Runner::Std);
    assert!(std.windows(2).any(|w| w[0] == "--backend" && w[1] == "std"));
    let records = parse(&["--records", "--threads", "3"]).unwrap();
    let child = parse_child(child_args(&records, Runner::Std));
    assert!(child.records && !child.hash && child.file_consumer.is_none());
    assert_eq!(child.threads, 3);
}

#[test]
fn the_runner_is_the_scan_unless_named() {
    for (args, want) in [
        (&[][..], Driver::Scan),
        (&["--runner", "scan"], Driver::Scan),
        (&["--runner=reader", "--threads", "2"], Driver::Reader),
        (
            &["--compare", "--runner", "reader", "--records"],
            Driver::Reader,
        ),
    ] {
        let opts = parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_eq!(opts.runner, want, "{args:?}");
        let named = format!("runner {}", want.name());
        assert!(opts.settings().contains(&named), "{args:?}");
    }
    let err = parse(&["--runner", "threads"]).unwrap_err();
    assert!(err.contains("scan") && err.contains("reader"), "{err}");
    // std alone has no runner to name.
    let std = parse(&["--backend", "std", "--runner", "reader"]).unwrap();
    assert!(!std.settings().contains("runner"), "{}", std.settings());
}

#[test]
fn every_child_of_a_comparison_gets_its_runner() {
    for runner in [Driver::Scan, Driver::Reader] {
        for parent in [&["--compare"][..], &[], &["--compare", "--threads", "2"]] {
            let args = [parent, &["--runner", runner.name()]].concat();
            let parent = parse(&args).unwrap();
            for role in [parent.ours(), Runner::Std] {
                let child = parse_child(child_args(&parent, role));
                assert_eq!(child.runner, runner, "{args:?}, {role:?}");
                assert_eq!(child.threads, parent.threads, "{args:?}, {role:?}");
            }
        }
    }
}

#[test]
fn every_child_of_a_comparison_gets_its_consumer() {
    for consumer in Consumer::CHOICES {
        for parent in [&["--compare"][..], &[]] {
            let args = [parent, &["--consumer", consumer.name()]].concat();
            let parent = parse(&args).unwrap();
            for runner in [parent.ours(), Runner::Std] {
                let child = parse_child(child_args(&parent, runner));
                assert_eq!(child.consumer(), consumer, "{args:?}, {runner:?}");
            }
        }
    }
}
