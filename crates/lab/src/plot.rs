//! PNG line charts (loss curves, mass against context, slopes per head). Text needs a TrueType font:
//! `$SHARPDRAFT_FONT` or a common system path; without one the chart is drawn without text and a
//! warning says so.

use crate::error::{Context, LabError, Result};
use plotters::coord::{ranged1d::ValueFormatter, types::RangedCoordf64};
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// One named series of `(x, y)` points, drawn as a line with a marker on each point and, where
/// `intervals` gives one, a vertical bar from its low to its high end.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// `(lo, hi)` per point (NaN: none); empty for a series without intervals.
    pub intervals: Vec<(f64, f64)>,
    /// Index into the palette; `None` takes the series' position. Charts that show the same methods
    /// pass each method's index, so a method keeps its colour from chart to chart.
    pub colour: Option<usize>,
}

impl Series {
    /// Points without intervals, coloured by position.
    pub fn plain(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            intervals: Vec::new(),
            colour: None,
        }
    }

    /// An empty series of palette colour `colour`, to [`Self::push`] points with intervals into.
    pub fn new(name: impl Into<String>, colour: usize) -> Self {
        Self {
            colour: Some(colour),
            ..Self::plain(name, Vec::new())
        }
    }

    /// Adds the point `(x, estimate)` with its interval `lo..hi` (NaN ends: no bar).
    pub fn push(&mut self, x: f64, estimate: f64, (lo, hi): (f64, f64)) {
        self.points.push((x, estimate));
        self.intervals.push((lo, hi));
    }

    /// Orders the points (and their intervals) by x.
    pub fn sort(&mut self) {
        let mut both: Vec<((f64, f64), (f64, f64))> = self
            .points
            .iter()
            .copied()
            .zip(
                self.intervals
                    .iter()
                    .copied()
                    .chain(std::iter::repeat((f64::NAN, f64::NAN))),
            )
            .collect();
        both.sort_by(|a, b| a.0 .0.total_cmp(&b.0 .0));
        let had_intervals = !self.intervals.is_empty();
        self.points = both.iter().map(|p| p.0).collect();
        self.intervals = if had_intervals {
            both.iter().map(|p| p.1).collect()
        } else {
            Vec::new()
        };
    }
}

/// Axis labels and title of a chart.
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub log_x: bool,
    /// A dashed horizontal line at this y (1 on a speed-up chart: the target alone).
    pub reference_y: Option<f64>,
}

/// The palette, in order; distinct under common colour blindness (Okabe and Ito).
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

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

/// A chart builder on `root` with a margin and, when a font is there (`text`), the title and label
/// areas (`y_label_area` pixels for the y axis's labels).
fn titled_builder<'a, 'b>(
    root: &'a DrawingArea<BitMapBackend<'b>, plotters::coord::Shift>,
    title: &str,
    y_label_area: u32,
    text: bool,
) -> ChartBuilder<'a, 'b, BitMapBackend<'b>> {
    let mut builder = ChartBuilder::on(root);
    builder.margin(16);
    if text {
        builder
            .caption(title, ("sans-serif", 22))
            .x_label_area_size(44)
            .y_label_area_size(y_label_area);
    }
    builder
}

/// Draws `series` as lines into a 900 x 560 PNG at `path` (written through a temporary file).
pub fn line_chart(path: &Path, chart: &Chart<'_>, series: &[Series]) -> Result<()> {
    let (x0, x1, y0, y1) = axis_ranges(chart, series);
    let text = font_available();
    png(path, (900, 560), |root, plot| {
        let mut builder = titled_builder(root, chart.title, 64, text);
        if chart.log_x {
            let ctx = builder
                .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
                .map_err(|e| plot(&e))?;
            draw_lines(ctx, chart, series, (x0, x1), text, plot)?;
        } else {
            let ctx = builder
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(|e| plot(&e))?;
            draw_lines(ctx, chart, series, (x0, x1), text, plot)?;
        }
        Ok(())
    })
}

/// The chart's `(x0, x1, y0, y1)`: the finite points' extent (positive x on a log axis), interval ends
/// and the reference line included, y padded by 5%; `0..1` on both axes when nothing is finite.
fn axis_ranges(chart: &Chart<'_>, series: &[Series]) -> (f64, f64, f64, f64) {
    // Interval ends count toward the y range, and so does the reference line.
    let ends = series.iter().flat_map(|s| {
        s.points
            .iter()
            .zip(&s.intervals)
            .flat_map(|(&(x, _), &(lo, hi))| [(x, lo), (x, hi)])
    });
    let reference = chart
        .reference_y
        .into_iter()
        .flat_map(|y| series.iter().flat_map(|s| s.points.first()).map(move |&(x, _)| (x, y)));
    let points = series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .chain(ends)
        .chain(reference)
        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!chart.log_x || *x > 0.0));
    let (mut x0, mut x1, mut y0, mut y1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for (x, y) in points {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if !x0.is_finite() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let pad = ((y1 - y0) * 0.05).max(1e-9);
    (x0, x1, y0 - pad, y1 + pad)
}

/// Draws the mesh, the dashed reference line over `x0..x1`, every series and (with text, for more
/// than one series) the legend on a linear or logarithmic x axis.
fn draw_lines<'a, 'b: 'a, X>(
    mut ctx: ChartContext<'a, BitMapBackend<'b>, Cartesian2d<X, RangedCoordf64>>,
    chart: &Chart<'_>,
    series: &[Series],
    (x0, x1): (f64, f64),
    text: bool,
    plot: &dyn Fn(&dyn std::fmt::Debug) -> LabError,
) -> Result<()>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
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
    if let Some(y) = chart.reference_y {
        ctx.draw_series(DashedLineSeries::new(
            [(x0, y), (x1, y)],
            6,
            4,
            BLACK.mix(0.6).stroke_width(1),
        ))
        .map_err(|e| plot(&e))?;
    }
    for (i, s) in series.iter().enumerate() {
        draw_one_series(&mut ctx, i, s, text, plot)?;
    }
    if text && series.len() > 1 {
        ctx.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| plot(&e))?;
    }
    Ok(())
}

/// Series `i`'s interval bars, markers (shape by position) and line, labelled for the legend with text.
fn draw_one_series<X>(
    ctx: &mut ChartContext<'_, BitMapBackend<'_>, Cartesian2d<X, RangedCoordf64>>,
    i: usize,
    s: &Series,
    text: bool,
    plot: &dyn Fn(&dyn std::fmt::Debug) -> LabError,
) -> Result<()>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let color = PALETTE[s.colour.unwrap_or(i) % PALETTE.len()];
    let finite: Vec<(f64, f64)> = s
        .points
        .iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    let bars = s
        .points
        .iter()
        .zip(&s.intervals)
        .filter(|((x, _), (lo, hi))| x.is_finite() && lo.is_finite() && hi.is_finite())
        .map(|(&(x, _), &(lo, hi))| {
            PathElement::new(vec![(x, lo), (x, hi)], color.stroke_width(2))
        });
    ctx.draw_series(bars).map_err(|e| plot(&e))?;
    // Markers of a different shape per series, so lines that coincide stay visible.
    let shape = i % 3;
    ctx.draw_series(finite.iter().map(|&p| -> DynElement<_, _> {
        match shape {
            0 => Circle::new(p, 4, color.filled()).into_dyn(),
            1 => TriangleMarker::new(p, 5, color.filled()).into_dyn(),
            _ => Cross::new(p, 5, color.stroke_width(2)).into_dyn(),
        }
    }))
    .map_err(|e| plot(&e))?;
    let line = ctx
        .draw_series(LineSeries::new(finite, color.stroke_width(2)))
        .map_err(|e| plot(&e))?;
    if text {
        line.label(s.name.as_str()).legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
        });
    }
    Ok(())
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
        let mut builder = titled_builder(root, chart.title, 480, text);
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
