//! PNG line charts (loss curves, mass against context, slopes per head). Text needs a TrueType font:
//! `$SHARPDRAFT_FONT` or a common system path; without one the chart is drawn without text and a
//! warning says so.

use crate::error::{Context, LabError, Result};
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// One named series of `(x, y)` points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Axis labels and title of a chart.
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub log_x: bool,
}

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/Library/Fonts/Arial.ttf",
];

/// Registers a font for plotters once; false when none was found.
fn font_available() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| {
        let candidates = std::env::var("SHARPDRAFT_FONT")
            .into_iter()
            .chain(FONT_PATHS.iter().map(|s| s.to_string()));
        for path in candidates {
            if let Ok(bytes) = std::fs::read(&path) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        eprintln!(
            "warning: no TrueType font found (set SHARPDRAFT_FONT): charts are drawn without text"
        );
        false
    })
}

/// Draws on a white `size` PNG and writes it to `path` through a temporary file; `draw` gets the
/// canvas and the error for a failed drawing call.
fn png(
    path: &Path,
    size: (u32, u32),
    draw: impl FnOnce(
        &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
        &dyn Fn(&dyn std::fmt::Debug) -> LabError,
    ) -> Result<()>,
) -> Result<()> {
    let tmp = path.with_extension("png.tmp.png");
    {
        let root = BitMapBackend::new(&tmp, size).into_drawing_area();
        let plot = |e: &dyn std::fmt::Debug| LabError::Plot {
            path: path.display().to_string(),
            reason: format!("{e:?}"),
        };
        root.fill(&WHITE).map_err(|e| plot(&e))?;
        draw(&root, &plot)?;
        root.present().map_err(|e| plot(&e))?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Draws `series` as lines into a 900 x 560 PNG at `path` (written through a temporary file).
pub fn line_chart(path: &Path, chart: &Chart<'_>, series: &[Series]) -> Result<()> {
    let points = series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!chart.log_x || *x > 0.0));
    let (mut x0, mut x1, mut y0, mut y1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for &(x, y) in points {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if !x0.is_finite() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let pad = ((y1 - y0) * 0.05).max(1e-9);
    let (y0, y1) = (y0 - pad, y1 + pad);
    let text = font_available();
    png(path, (900, 560), |root, plot| {
        let mut builder = ChartBuilder::on(root);
        builder.margin(16);
        if text {
            builder
                .caption(chart.title, ("sans-serif", 22))
                .x_label_area_size(44)
                .y_label_area_size(64);
        }
        let colors = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
        macro_rules! draw {
            ($ctx:expr) => {{
                let mut ctx = $ctx;
                let mut mesh = ctx.configure_mesh();
                // `{}` prints 200 rather than 200.0, and keeps fractions where the axis has them.
                let x_format = |x: &f64| format!("{}", (x * 1e6).round() / 1e6);
                if text {
                    mesh.x_desc(chart.x_label)
                        .y_desc(chart.y_label)
                        .x_label_formatter(&x_format);
                } else {
                    mesh.disable_x_axis().disable_y_axis();
                }
                mesh.draw().map_err(|e| plot(&e))?;
                for (i, s) in series.iter().enumerate() {
                    let color = colors[i % colors.len()];
                    let line = ctx
                        .draw_series(LineSeries::new(
                            s.points
                                .iter()
                                .copied()
                                .filter(|(x, y)| x.is_finite() && y.is_finite()),
                            color.stroke_width(2),
                        ))
                        .map_err(|e| plot(&e))?;
                    if text {
                        line.label(s.name.as_str()).legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                        });
                    }
                }
                if text && series.len() > 1 {
                    ctx.configure_series_labels()
                        .background_style(WHITE.mix(0.8))
                        .border_style(BLACK)
                        .draw()
                        .map_err(|e| plot(&e))?;
                }
            }};
        }
        if chart.log_x {
            draw!(builder
                .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
                .map_err(|e| plot(&e))?);
        } else {
            draw!(builder
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(|e| plot(&e))?);
        }
        Ok(())
    })
}

/// Draws one horizontal bar per `(label, value)` into a PNG at `path` (written through a temporary
/// file); non-finite values are left out. `chart.x_label` names the values' axis.
pub fn bar_chart(path: &Path, chart: &Chart<'_>, bars: &[(String, f64)]) -> Result<()> {
    let bars: Vec<&(String, f64)> = bars.iter().filter(|(_, v)| v.is_finite()).collect();
    let top = bars
        .iter()
        .map(|(_, v)| *v)
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let height = (120 + 28 * bars.len()).clamp(240, 2400) as u32;
    let text = font_available();
    // Wide enough for labels of the form "workload drafter / method @context".
    png(path, (1200, height), |root, plot| {
        let mut builder = ChartBuilder::on(root);
        builder.margin(16);
        if text {
            builder
                .caption(chart.title, ("sans-serif", 22))
                .x_label_area_size(44)
                .y_label_area_size(480);
        }
        let mut ctx = builder
            .build_cartesian_2d(0.0..top, (0..bars.len().max(1)).into_segmented())
            .map_err(|e| plot(&e))?;
        let mut mesh = ctx.configure_mesh();
        let label = |v: &SegmentValue<usize>| match v {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                bars.get(*i).map(|(l, _)| l.clone()).unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        };
        if text {
            mesh.x_desc(chart.x_label)
                .y_labels(bars.len().max(1))
                .y_label_formatter(&label)
                .disable_y_mesh();
        } else {
            mesh.disable_x_axis().disable_y_axis();
        }
        mesh.draw().map_err(|e| plot(&e))?;
        ctx.draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
            Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(i)),
                    (*v, SegmentValue::Exact(i + 1)),
                ],
                BLUE.mix(0.6).filled(),
            )
        }))
        .map_err(|e| plot(&e))?;
        Ok(())
    })
}
