//! `plot_xy`: series that are not records (the cluster verdict's simulated detection curves)
//! drawn to SVG and PNG, and refused with nothing to draw or an unknown extension.

use efabench_report::plot::{plot_xy, Series};

struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn series_are_drawn_with_their_titles() {
    let d = Dir(std::env::temp_dir().join(format!("efabench-plot-xy-{}", std::process::id())));
    std::fs::create_dir_all(&d.0).unwrap();
    let s = [Series {
        label: "8 nodes".into(),
        time_sliced: false,
        points: vec![(50.0, 100.0), (90.0, 40.0), (95.0, 0.0)],
    }];
    let svg = d.0.join("c.svg");
    plot_xy(&s, "detection", "speed, %", "named, %", &svg).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    for want in ["detection", "speed, %", "named, %", "8 nodes"] {
        assert!(text.contains(want), "{want} missing");
    }
    let png = d.0.join("c.png");
    plot_xy(&s, "detection", "x", "y", &png).unwrap();
    assert!(std::fs::metadata(&png).unwrap().len() > 1000);
    let empty = [Series {
        points: Vec::new(),
        ..s[0].clone()
    }];
    assert!(plot_xy(&empty, "t", "x", "y", &svg).is_err());
    assert!(plot_xy(&s, "t", "x", "y", &d.0.join("c.gif")).is_err());
}
