use super::*;

#[test]
fn defaults_validate_and_deserialize() {
    let c: AfXdpConfig = toml::from_str(r#"iface = "veth0""#).unwrap();
    assert_eq!(c, AfXdpConfig::new("veth0"));
    assert!(c.validate().is_ok());
    assert_eq!((c.queues, c.mode, c.zerocopy), (None, XdpMode::Native, ZeroCopy::Auto));
    assert_eq!(c.max_frame_len(), 2048 - 256);
    let c: AfXdpConfig = toml::from_str(
        r#"iface = "eth1"
           queues = 4
           mode = "auto"
           zerocopy = false
           frames = 1024
           frame_size = 4096"#,
    )
    .unwrap();
    assert!(c.validate().is_ok());
    assert_eq!((c.queues, c.mode, c.zerocopy), (Some(4), XdpMode::Auto, ZeroCopy::Off));
    assert_eq!((c.frames, c.frame_size), (1024, 4096));
    for (text, want) in [
        ("true", ZeroCopy::On),
        ("false", ZeroCopy::Off),
        ("\"auto\"", ZeroCopy::Auto),
    ] {
        let c: AfXdpConfig = toml::from_str(&format!("iface = \"a\"\nzerocopy = {text}")).unwrap();
        assert_eq!(c.zerocopy, want);
    }
    let c: AfXdpConfig = toml::from_str("iface = \"a\"\nmode = \"skb\"").unwrap();
    assert_eq!(c.mode, XdpMode::Skb);
    for (text, want) in [("\"same\"", RxWorker::Same), ("\"other\"", RxWorker::Other)] {
        let c: AfXdpConfig = toml::from_str(&format!("iface = \"a\"\nrx_worker = {text}")).unwrap();
        assert_eq!(c.rx_worker, want);
    }
    let e = toml::from_str::<AfXdpConfig>("iface = \"a\"\nrx_worker = \"next\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("same") && e.contains("other"), "{e}");
}

#[test]
fn unknown_fields_and_bad_words_are_rejected() {
    let e = toml::from_str::<AfXdpConfig>("iface = \"a\"\nqueue = 1")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field"), "{e}");
    let e = toml::from_str::<AfXdpConfig>("queues = 1").unwrap_err().to_string();
    assert!(e.contains("iface"), "{e}");
    let e = toml::from_str::<AfXdpConfig>("iface = \"a\"\nmode = \"driver\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("native") && e.contains("skb"), "{e}");
    let e = toml::from_str::<AfXdpConfig>("iface = \"a\"\nzerocopy = \"yes\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("zerocopy") && e.contains("auto"), "{e}");
}

/// The default configuration of "veth0" changed by `f`.
fn with(f: impl FnOnce(&mut AfXdpConfig)) -> AfXdpConfig {
    let mut c = AfXdpConfig::new("veth0");
    f(&mut c);
    c
}

#[test]
fn bad_values_name_the_field() {
    let cases = [
        (AfXdpConfig::new(""), "iface"),
        (AfXdpConfig::new("a-very-long-interface"), "iface"),
        (with(|c| c.queues = Some(0)), "queues"),
        (with(|c| c.queues = Some(MAX_QUEUES + 1)), "queues"),
        (with(|c| c.frames = 1000), "frames"),
        (with(|c| c.frames = 32), "frames"),
        (with(|c| c.frame_size = 1024), "frame_size"),
        (
            with(|c| {
                c.mode = XdpMode::Skb;
                c.zerocopy = ZeroCopy::On;
            }),
            "zerocopy",
        ),
    ];
    for (c, field) in cases {
        match (c.validate(), AfXdpPort::new(c.clone())) {
            (Err(e), Err(p)) => assert!(e.starts_with(field) && p.to_string() == e, "{c:?}: {e}"),
            _ => panic!("{c:?} must be refused"),
        }
    }
}

#[test]
fn opening_a_missing_interface_fails_cleanly() {
    let mut p = AfXdpPort::new(AfXdpConfig::new("fw-nonexist0")).unwrap();
    let e = p.open(1).err().expect("no such interface").to_string();
    assert!(e.contains("interface \"fw-nonexist0\""), "{e}");
    assert!(p.link.is_none() && p.socks.is_empty());
    assert!(p.close().is_ok());
    assert_eq!((p.stats(), p.attached()), Default::default());
}

#[test]
fn asking_for_more_queues_than_the_interface_has_is_refused_before_anything_is_set_up() {
    // The loopback interface has one RX queue.
    if rx_queue_count("lo", 1) != Some(1) {
        freeway_testkit::skip("neither ethtool nor sysfs gives the queue count of lo");
        return;
    }
    let mut p = AfXdpPort::new(with(|c| {
        c.iface = "lo".into();
        c.queues = Some(2);
    }))
    .unwrap();
    let e = p.open(1).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("queues = 2") && e.contains("\"lo\" has 1 RX queue "), "{e}");
    assert!(p.link.is_none());
}
