//! The SVG weir-plot writes: well-formed XML, every coordinate finite and
//! inside the figure whatever the data (NaN, infinities, empty series,
//! x <= 0 on a log axis, one value only), text large enough to read, and
//! the caller's ticks, legend and escaping intact.

use weir_plot::{Axis, Bar, Bars, Figure, Lines, Panel, Point, Series, Style, MIN_FONT};

/// Geometry attributes of the elements plotters writes.
const COORDS: [&str; 11] = [
    "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "width", "height",
];

/// Parses `svg`, checks every coordinate and font size, and returns the
/// texts drawn, in document order.
fn check(svg: &str, (w, h): (u32, u32)) -> Vec<String> {
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    let doc = roxmltree::Document::parse(svg).expect("well-formed XML");
    let (w, h) = (f64::from(w), f64::from(h));
    let inside = |name: &str, v: f64| match name {
        "x" | "x1" | "x2" | "cx" | "width" => (0.0..=w).contains(&v),
        "y" | "y1" | "y2" | "cy" | "height" => (0.0..=h).contains(&v),
        _ => (0.0..=w.max(h)).contains(&v),
    };
    let mut texts = Vec::new();
    for n in doc.descendants().filter(|n| n.is_element()) {
        for name in COORDS {
            if let Some(a) = n.attribute(name) {
                let v: f64 = a.parse().unwrap_or_else(|_| panic!("{name}={a:?}"));
                assert!(
                    v.is_finite() && inside(name, v),
                    "<{:?} {name}={a}>",
                    n.tag_name()
                );
            }
        }
        if let Some(points) = n.attribute("points") {
            for xy in points.split_whitespace() {
                let (x, y) = xy.split_once(',').expect("x,y");
                let (x, y): (f64, f64) = (x.parse().unwrap(), y.parse().unwrap());
                assert!(inside("x", x) && inside("y", y), "point {xy}");
            }
        }
        if n.has_tag_name("text") {
            let size: f64 = n.attribute("font-size").unwrap().parse().unwrap();
            assert!(size >= f64::from(MIN_FONT) - 0.01, "font-size {size}");
            texts.push(n.text().unwrap_or_default().trim().to_string());
        }
    }
    for t in &texts {
        assert!(
            !t.contains("NaN") && !t.contains("inf"),
            "text {t:?} in {svg}"
        );
    }
    texts
}

fn series(name: &str, color: usize, points: Vec<Point>) -> Series {
    Series {
        name: name.into(),
        style: Style::solid(color),
        points,
    }
}

fn one_panel(panel: Panel) -> Figure {
    Figure {
        title: "t".into(),
        subtitle: None,
        panels: vec![panel],
        columns: 1,
        size: (760, 460),
    }
}

#[test]
fn every_coordinate_is_finite_whatever_the_data() {
    let bad = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e308, -1e308];
    let hostile: Vec<Point> = bad
        .iter()
        .flat_map(|&v| {
            [
                Point::new(v, 1.0),
                Point::new(1.0, v),
                Point::with_err(2.0, 0.5, v),
            ]
        })
        .chain([
            Point::new(0.0, 0.7),
            Point::new(-3.0, 0.8),
            Point::new(10.0, 0.9),
        ])
        .collect();
    let cases = [
        // Linear and log x, hostile points among good ones.
        Lines {
            title: "lin".into(),
            x: Axis::new("x"),
            y: Axis::new("y"),
            series: vec![series("a", 0, hostile.clone())],
        },
        Lines {
            title: "log".into(),
            x: Axis::new("x").log(),
            y: Axis::new("y").log(),
            series: vec![series("a", 0, hostile.clone())],
        },
        // Nothing drawable at all, and no series.
        Lines {
            title: "".into(),
            x: Axis::new("x").log(),
            y: Axis::new("y"),
            series: vec![series("nan", 1, vec![Point::new(f64::NAN, f64::NAN)])],
        },
        Lines {
            title: "empty".into(),
            x: Axis::new("x"),
            y: Axis::new("y").from_zero(),
            series: vec![],
        },
        // One point; a constant series; ticks outside the data.
        Lines {
            title: "one".into(),
            x: Axis::new("x").ticks(vec![(f64::INFINITY, "∞".into()), (3.0, "3".into())]),
            y: Axis::new("y"),
            series: vec![
                series("p", 2, vec![Point::new(5.0, 0.5)]),
                series("c", 3, vec![Point::new(1.0, 2.0), Point::new(9.0, 2.0)]),
            ],
        },
    ];
    for lines in cases {
        let fig = one_panel(Panel::Lines(lines.clone()));
        check(&fig.svg().unwrap(), fig.size);
    }
    let bars = Bars {
        title: "bars".into(),
        y: Axis::new("ms"),
        bars: bad
            .iter()
            .enumerate()
            .map(|(k, &v)| Bar {
                label: format!("bar {k}"),
                value: v,
                err: Some(v),
                style: Style::solid(0),
            })
            .chain([Bar {
                label: "ok".into(),
                value: -2.0,
                err: Some(0.5),
                style: Style::solid(1),
            }])
            .collect(),
    };
    let fig = one_panel(Panel::Bars(bars));
    check(&fig.svg().unwrap(), fig.size);
    let fig = one_panel(Panel::Bars(Bars {
        title: "none".into(),
        y: Axis::new("y"),
        bars: vec![],
    }));
    check(&fig.svg().unwrap(), fig.size);
}

#[test]
fn ticks_legend_and_escaping_come_through() {
    let lines = Lines {
        title: "Ω vs m".into(),
        x: Axis::new("m").ticks(vec![
            (1.0, "1".into()),
            (4.0, "4".into()),
            (6.0, "∞".into()),
        ]),
        y: Axis::new("Ω"),
        series: vec![
            series(
                "AWFD(m)",
                0,
                vec![Point::new(1.0, 0.8), Point::new(4.0, 0.95)],
            ),
            Series {
                name: "m = ∞ & more <x>".into(),
                style: Style::dashed(1),
                points: vec![Point::new(1.0, 0.9), Point::new(6.0, 0.9)],
            },
        ],
    };
    let bars = Bars {
        title: "(b) bars".into(),
        y: Axis::new("MB/s"),
        bars: vec![
            Bar {
                label: "ECMP (m=0)".into(),
                value: 12.8,
                err: Some(0.4),
                style: Style::solid(0),
            },
            Bar {
                label: "AWFD m=4".into(),
                value: 13.2,
                err: None,
                style: Style::solid(2),
            },
        ],
    };
    let fig = Figure {
        title: "a < b".into(),
        subtitle: Some("sub & title".into()),
        panels: vec![Panel::Lines(lines.clone()), Panel::Bars(bars)],
        columns: 2,
        size: (1000, 500),
    };
    let svg = fig.svg().unwrap();
    let texts = check(&svg, fig.size);
    for want in [
        "a < b",
        "sub & title",
        "Ω vs m",
        "∞",
        "4",
        "AWFD(m)",
        "m = ∞ & more <x>",
        "ECMP (m=0)",
        "AWFD m=4",
        "MB/s",
    ] {
        assert!(texts.iter().any(|t| t == want), "{want:?} not in {texts:?}");
    }
    // One legend entry per series name, in the grid's legend.
    assert_eq!(texts.iter().filter(|t| *t == "AWFD(m)").count(), 1);
    // A single panel puts its legend on the right.
    let single = one_panel(Panel::Lines(lines));
    let texts = check(&single.svg().unwrap(), single.size);
    assert!(texts.iter().any(|t| t == "AWFD(m)"), "{texts:?}");
}
