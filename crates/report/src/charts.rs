//! PNG line charts (loss curves, mass against context, slopes per head). Text needs a TrueType font:
//! `$SHARPDRAFT_FONT` or a common system path; without one the chart is drawn without text and a
//! warning says so.

use crate::error::{ReportError, Result};
use plotters::coord::{ranged1d::ValueFormatter, types::RangedCoordf64};
use plotters::element::{Drawable, PointCollection};
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
        &dyn Fn(&dyn std::fmt::Debug) -> ReportError,
    ) -> Result<()>,
) -> Result<()> {
    let tmp = path.with_extension("png.tmp.png");
    {
        let root = BitMapBackend::new(&tmp, size).into_drawing_area();
        let plot = |e: &dyn std::fmt::Debug| ReportError::Plot {
            path: path.display().to_string(),
            reason: format!("{e:?}"),
        };
        root.fill(&WHITE).map_err(|e| plot(&e))?;
        draw(&root, &plot)?;
        root.present().map_err(|e| plot(&e))?;
    }
    std::fs::rename(&tmp, path)
        .map_err(|e| ReportError::failed(format_args!("writing {}", path.display()), e))?;
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
    let every: Vec<&Series> = series.iter().collect();
    let (ranges, ticks) = (axis_ranges(chart, &every), log_ticks(&every));
    let text = font_available();
    png(path, (900, 560), |root, plot| {
        let builder = titled_builder(root, chart.title, 64, text);
        let look = Look {
            text,
            markers: Markers::ByPosition,
            legend: text && series.len() > 1,
        };
        draw_panel(builder, chart, series, (ranges, &ticks), look, plot)
    })
}

/// One panel of a [`panel_chart`]: its title (what its series share, a drafter say) and its series.
pub struct Panel {
    pub title: String,
    pub series: Vec<Series>,
}

/// Pixels of one panel of a [`panel_chart`], of the legend column beside them and of the title row.
pub const PANEL_SIZE: (u32, u32) = (560, 380);
pub const LEGEND_WIDTH: u32 = 240;
pub const TITLE_HEIGHT: u32 = 40;

/// The `(columns, rows)` of a [`panel_chart`] of `panels` panels: two columns from two panels on.
pub fn panel_grid(panels: usize) -> (usize, usize) {
    let columns = panels.clamp(1, 2);
    (columns, panels.max(1).div_ceil(columns))
}

/// Draws each panel as a small line chart, every panel on the same axes, with one legend in a column
/// to the right (one entry per colour, named by the first series of that colour), into a PNG at
/// `path` (written through a temporary file). Where one chart would hold too many lines to read, the
/// panels split them by what they share: a method keeps its colour and marker in every panel.
pub fn panel_chart(path: &Path, chart: &Chart<'_>, panels: &[Panel]) -> Result<()> {
    let every: Vec<&Series> = panels.iter().flat_map(|p| &p.series).collect();
    // A series' position differs from panel to panel, so only a colour of its own ties it to the
    // legend.
    if let Some(s) = every.iter().find(|s| s.colour.is_none()) {
        return Err(ReportError::Plot {
            path: path.display().to_string(),
            reason: format!(
                "series {:?} has no colour: every series of a chart of panels needs one (Series::new)",
                s.name
            ),
        });
    }
    let (ranges, ticks) = (axis_ranges(chart, &every), log_ticks(&every));
    let legend = legend_entries(&every);
    let (columns, rows) = panel_grid(panels.len());
    let size = (
        columns as u32 * PANEL_SIZE.0 + LEGEND_WIDTH,
        rows as u32 * PANEL_SIZE.1 + TITLE_HEIGHT,
    );
    let text = font_available();
    png(path, size, |root, plot| {
        let (title, body) = root.split_vertically(TITLE_HEIGHT);
        let (grid, legend_column) = body.split_horizontally(columns as u32 * PANEL_SIZE.0);
        if text {
            title
                .draw_text(
                    chart.title,
                    &("sans-serif", 22).into_text_style(&title),
                    (16, 10),
                )
                .map_err(|e| plot(&e))?;
            draw_legend(&legend_column, &legend, plot)?;
        }
        for (panel, area) in panels.iter().zip(grid.split_evenly((rows, columns))) {
            let mut builder = ChartBuilder::on(&area);
            builder.margin(10);
            if text {
                builder
                    .caption(&panel.title, ("sans-serif", 17))
                    .x_label_area_size(40)
                    .y_label_area_size(56);
            }
            // No legend inside a panel: the column beside the grid is the legend of them all.
            let look = Look {
                text,
                markers: Markers::ByColour,
                legend: false,
            };
            draw_panel(builder, chart, &panel.series, (ranges, &ticks), look, plot)?;
        }
        Ok(())
    })
}

/// The legend of a [`panel_chart`]: `(colour index, name)` once per colour, in colour order, named
/// by the first series of that colour.
pub fn legend_entries(series: &[&Series]) -> Vec<(usize, String)> {
    let mut entries: Vec<(usize, String)> = Vec::new();
    for (i, s) in series.iter().enumerate() {
        let colour = s.colour.unwrap_or(i);
        if !entries.iter().any(|(c, _)| *c == colour) {
            entries.push((colour, s.name.clone()));
        }
    }
    entries.sort_by_key(|(c, _)| *c);
    entries
}

/// Draws `entries` down `area`: a short line with the colour's marker, then the name.
fn draw_legend(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    entries: &[(usize, String)],
    plot: &dyn Fn(&dyn std::fmt::Debug) -> ReportError,
) -> Result<()> {
    let style = ("sans-serif", 16).into_text_style(area);
    for (row, (colour, name)) in entries.iter().enumerate() {
        let y = 40 + 26 * row as i32;
        let color = PALETTE[colour % PALETTE.len()];
        area.draw(&PathElement::new(
            vec![(12, y), (44, y)],
            color.stroke_width(2),
        ))
        .map_err(|e| plot(&e))?;
        area.draw(&marker((28, y), shape_of_colour(*colour), color))
            .map_err(|e| plot(&e))?;
        area.draw_text(name, &style, (52, y - 9))
            .map_err(|e| plot(&e))?;
    }
    Ok(())
}

/// Which marker shape a series gets: by its position in the chart (lines of one colour stay apart)
/// or by its colour (a method keeps its marker from panel to panel, as in the legend).
#[derive(Clone, Copy)]
enum Markers {
    ByPosition,
    ByColour,
}

/// How a chart's lines are drawn: with text (axis labels; none without a font), which markers, and
/// whether a legend goes inside the plot.
#[derive(Clone, Copy)]
struct Look {
    text: bool,
    markers: Markers,
    legend: bool,
}

/// Marker shapes: filled circle, triangle and square, a cross, then hollow circle, triangle and square.
const SHAPES: usize = 7;

/// The marker shape of palette colour `colour` where shapes go by colour. Seven shapes for eight
/// colours: no two of the first seven share one, nor do the colours alike (vermillion, orange and
/// yellow at 1, 4 and 7; blue and sky blue at 0 and 5); the eighth (yellow) shares the circle with
/// blue.
fn shape_of_colour(colour: usize) -> usize {
    (colour % PALETTE.len()) % SHAPES
}

/// A marker at `p` of shape `shape % SHAPES` (see [`SHAPES`]) in `color`.
fn marker<DB: DrawingBackend, C: Clone + 'static>(
    p: C,
    shape: usize,
    color: RGBColor,
) -> DynElement<'static, DB, C> {
    let (filled, outline) = (color.filled(), color.stroke_width(2));
    let square = |style| SquareMarker {
        at: p.clone(),
        style,
    };
    match shape % SHAPES {
        0 => Circle::new(p, 4, filled).into_dyn(),
        1 => TriangleMarker::new(p, 5, filled).into_dyn(),
        2 => Cross::new(p, 5, outline).into_dyn(),
        3 => square(filled).into_dyn(),
        4 => Circle::new(p, 4, outline).into_dyn(),
        5 => TriangleMarker::new(p, 5, outline).into_dyn(),
        _ => square(outline).into_dyn(),
    }
}

/// A square marker 4 pixels out from its point each way, whatever the axes' coordinates. Plotters has
/// circles, triangles and crosses; a square made of its composable elements would tie the marker's
/// type to the backend's lifetime.
struct SquareMarker<C> {
    at: C,
    style: ShapeStyle,
}

impl<'a, C: 'a> PointCollection<'a, C> for &'a SquareMarker<C> {
    type Point = &'a C;
    type IntoIter = std::iter::Once<&'a C>;
    fn point_iter(self) -> Self::IntoIter {
        std::iter::once(&self.at)
    }
}

impl<C, DB: DrawingBackend> Drawable<DB> for SquareMarker<C> {
    fn draw<I: Iterator<Item = (i32, i32)>>(
        &self,
        mut points: I,
        backend: &mut DB,
        _parent_dim: (u32, u32),
    ) -> std::result::Result<(), plotters_backend::DrawingErrorKind<DB::ErrorType>> {
        match points.next() {
            Some((x, y)) => backend.draw_rect(
                (x - 4, y - 4),
                (x + 4, y + 4),
                &self.style,
                self.style.filled,
            ),
            None => Ok(()),
        }
    }
}

/// An axis label: whole numbers from 100 up, three significant digits below (16.2, not 16.234375),
/// no trailing zeros (200, not 200.0).
pub fn tick_label(x: f64) -> String {
    if !x.is_finite() || x == 0.0 {
        return format!("{x}");
    }
    let digits = (2 - x.abs().log10().floor() as i32).max(0) as usize;
    let text = format!("{x:.digits$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// The ticks of a logarithmic x axis: the points' own x values where there are 2 to 8 of them (the
/// contexts a run measured: 256, 1024, 4096, 8192), none (the axis's own) otherwise. The axis's own
/// ticks of a log scale crowd its top decade (5000 6000 7000 8000) and often miss the points.
pub fn log_ticks(series: &[&Series]) -> Vec<f64> {
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    xs.sort_by(f64::total_cmp);
    // Points within 0.1% of each other share a tick.
    xs.dedup_by(|a, b| (*a - *b).abs() <= 1e-3 * b.abs());
    if (2..=8).contains(&xs.len()) {
        xs
    } else {
        Vec::new()
    }
}

/// Builds `builder`'s axes over `(x0, x1, y0, y1)` (logarithmic x where the chart asks, with ticks at
/// `x_ticks` when there are any) and draws `series` on them.
fn draw_panel(
    mut builder: ChartBuilder<'_, '_, BitMapBackend<'_>>,
    chart: &Chart<'_>,
    series: &[Series],
    ((x0, x1, y0, y1), x_ticks): ((f64, f64, f64, f64), &[f64]),
    look: Look,
    plot: &dyn Fn(&dyn std::fmt::Debug) -> ReportError,
) -> Result<()> {
    if chart.log_x && !x_ticks.is_empty() {
        let ctx = builder
            .build_cartesian_2d(
                (x0..x1).log_scale().with_key_points(x_ticks.to_vec()),
                y0..y1,
            )
            .map_err(|e| plot(&e))?;
        draw_lines(ctx, chart, series, (x0, x1), look, plot)
    } else if chart.log_x {
        let ctx = builder
            .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
            .map_err(|e| plot(&e))?;
        draw_lines(ctx, chart, series, (x0, x1), look, plot)
    } else {
        let ctx = builder
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| plot(&e))?;
        draw_lines(ctx, chart, series, (x0, x1), look, plot)
    }
}

/// The chart's `(x0, x1, y0, y1)`: the finite points' extent (positive x on a log axis), interval ends
/// and the reference line included, y padded by 5%; `0..1` on both axes when nothing is finite.
fn axis_ranges(chart: &Chart<'_>, series: &[&Series]) -> (f64, f64, f64, f64) {
    // Interval ends count toward the y range, and so does the reference line.
    let ends = series.iter().flat_map(|s| {
        s.points
            .iter()
            .zip(&s.intervals)
            .flat_map(|(&(x, _), &(lo, hi))| [(x, lo), (x, hi)])
    });
    let reference = chart.reference_y.into_iter().flat_map(|y| {
        series
            .iter()
            .flat_map(|s| s.points.first())
            .map(move |&(x, _)| (x, y))
    });
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

/// Draws the mesh, the dashed reference line over `x0..x1`, every series and (where `look` asks) the
/// legend on a linear or logarithmic x axis.
fn draw_lines<'a, 'b: 'a, X>(
    mut ctx: ChartContext<'a, BitMapBackend<'b>, Cartesian2d<X, RangedCoordf64>>,
    chart: &Chart<'_>,
    series: &[Series],
    (x0, x1): (f64, f64),
    look: Look,
    plot: &dyn Fn(&dyn std::fmt::Debug) -> ReportError,
) -> Result<()>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let mut mesh = ctx.configure_mesh();
    let x_format = |x: &f64| tick_label(*x);
    if look.text {
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
        draw_one_series(&mut ctx, i, s, look, plot)?;
    }
    if look.legend {
        ctx.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| plot(&e))?;
    }
    Ok(())
}

/// Series `i`'s interval bars, markers and line, labelled for the legend where `look` has one.
fn draw_one_series<X>(
    ctx: &mut ChartContext<'_, BitMapBackend<'_>, Cartesian2d<X, RangedCoordf64>>,
    i: usize,
    s: &Series,
    look: Look,
    plot: &dyn Fn(&dyn std::fmt::Debug) -> ReportError,
) -> Result<()>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let colour = s.colour.unwrap_or(i);
    let color = PALETTE[colour % PALETTE.len()];
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
    // Markers of a different shape per series (or per colour), so lines that coincide stay visible.
    let shape = match look.markers {
        Markers::ByPosition => i,
        Markers::ByColour => shape_of_colour(colour),
    };
    ctx.draw_series(finite.iter().map(|&p| marker(p, shape, color)))
        .map_err(|e| plot(&e))?;
    let line = ctx
        .draw_series(LineSeries::new(finite, color.stroke_width(2)))
        .map_err(|e| plot(&e))?;
    if look.legend {
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

/// One panel of a [`heat_map`]: a grid of values in 0..=1, `values[row][column]` (NaN: no value).
pub struct HeatPanel {
    pub title: String,
    pub rows: Vec<String>,
    pub columns: Vec<String>,
    pub values: Vec<Vec<f64>>,
}

/// Pixels of one heat-map panel.
pub const HEAT_PANEL_SIZE: (u32, u32) = (520, 320);

/// A colour for `v` in 0..=1, from dark blue (0) through teal to yellow (1), readable in grey too; light
/// grey for no value.
fn heat_colour(v: f64) -> RGBColor {
    if !v.is_finite() {
        return RGBColor(230, 230, 230);
    }
    // Three stops of viridis: (68, 1, 84), (33, 145, 140), (253, 231, 37).
    let stops = [
        (68.0, 1.0, 84.0),
        (33.0, 145.0, 140.0),
        (253.0, 231.0, 37.0),
    ];
    let x = v.clamp(0.0, 1.0) * 2.0;
    let (a, b, t) = if x < 1.0 {
        (stops[0], stops[1], x)
    } else {
        (stops[1], stops[2], x - 1.0)
    };
    let mix = |p: f64, q: f64| (p + (q - p) * t).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// Draws each panel as a grid of coloured cells (value in the cell where a font is there), panels in
/// two columns, into a PNG at `path` (written through a temporary file). Row labels go down the left of
/// each panel, column labels across its top.
pub fn heat_map(path: &Path, title: &str, panels: &[HeatPanel]) -> Result<()> {
    let (columns, rows) = panel_grid(panels.len());
    let size = (
        columns as u32 * HEAT_PANEL_SIZE.0,
        rows as u32 * HEAT_PANEL_SIZE.1 + TITLE_HEIGHT,
    );
    let text = font_available();
    png(path, size, |root, plot| {
        let (title_area, grid) = root.split_vertically(TITLE_HEIGHT);
        if text {
            title_area
                .draw_text(
                    title,
                    &("sans-serif", 22).into_text_style(&title_area),
                    (16, 10),
                )
                .map_err(|e| plot(&e))?;
        }
        for (panel, area) in panels.iter().zip(grid.split_evenly((rows, columns))) {
            let (width, height) = area.dim_in_pixel();
            let (left, top) = (110i32, 56i32);
            let cell_w = (width as i32 - left - 12) / panel.columns.len().max(1) as i32;
            let cell_h = (height as i32 - top - 12) / panel.rows.len().max(1) as i32;
            let small = ("sans-serif", 14).into_text_style(&area);
            if text {
                area.draw_text(
                    &panel.title,
                    &("sans-serif", 16).into_text_style(&area),
                    (10, 8),
                )
                .map_err(|e| plot(&e))?;
                for (c, label) in panel.columns.iter().enumerate() {
                    area.draw_text(label, &small, (left + c as i32 * cell_w + 6, top - 20))
                        .map_err(|e| plot(&e))?;
                }
            }
            for (r, label) in panel.rows.iter().enumerate() {
                let y = top + r as i32 * cell_h;
                if text {
                    area.draw_text(label, &small, (8, y + cell_h / 2 - 7))
                        .map_err(|e| plot(&e))?;
                }
                for c in 0..panel.columns.len() {
                    let v = panel
                        .values
                        .get(r)
                        .and_then(|row| row.get(c))
                        .copied()
                        .unwrap_or(f64::NAN);
                    let x = left + c as i32 * cell_w;
                    area.draw(&Rectangle::new(
                        [(x, y), (x + cell_w - 2, y + cell_h - 2)],
                        heat_colour(v).filled(),
                    ))
                    .map_err(|e| plot(&e))?;
                    if text && v.is_finite() {
                        let ink = if v > 0.6 { BLACK } else { WHITE };
                        area.draw_text(
                            &format!("{v:.2}"),
                            &("sans-serif", 14).into_text_style(&area).color(&ink),
                            (x + cell_w / 2 - 14, y + cell_h / 2 - 7),
                        )
                        .map_err(|e| plot(&e))?;
                    }
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn series(name: &str, colour: usize) -> Series {
        let mut s = Series::new(name, colour);
        s.push(256.0, 1.2, (1.1, 1.3));
        s.push(8192.0, 0.9, (f64::NAN, f64::NAN));
        s
    }

    /// Width and height from a PNG's header chunk (bytes 16..24, big-endian).
    fn png_size(path: &Path) -> (u32, u32) {
        let bytes = std::fs::read(path).unwrap();
        let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        (word(16), word(20))
    }

    #[test]
    fn axis_labels_keep_three_significant_digits_below_100_and_whole_numbers_above() {
        let labels: Vec<String> = [16.234375, 1.0625, 0.125, 200.0, 8192.0, 2.5, 0.0]
            .into_iter()
            .map(tick_label)
            .collect();
        assert_eq!(labels, ["16.2", "1.06", "0.125", "200", "8192", "2.5", "0"]);
    }

    #[test]
    fn a_log_axis_ticks_the_contexts_measured_and_leaves_many_to_the_axis() {
        let contexts = series("fixed", 1);
        let mut again = series("unmodified", 0);
        again.push(256.1, 1.0, (f64::NAN, f64::NAN));
        assert_eq!(log_ticks(&[&contexts, &again]), [256.0, 8192.0]);
        let mut many = Series::new("bins", 0);
        for x in 1..=9 {
            many.push(f64::from(x), 1.0, (f64::NAN, f64::NAN));
        }
        assert!(log_ticks(&[&many]).is_empty());
    }

    #[test]
    fn colours_alike_and_the_first_seven_get_different_markers() {
        for (alike, other) in [(1, 4), (4, 7), (1, 7), (0, 5)] {
            assert_ne!(shape_of_colour(alike), shape_of_colour(other));
        }
        let first_seven: BTreeSet<usize> = (0..7).map(shape_of_colour).collect();
        assert_eq!(first_seven.len(), 7);
    }

    #[test]
    fn a_chart_of_panels_refuses_a_series_without_a_colour_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let panel = Panel {
            title: "dflash".into(),
            series: vec![Series::plain("uncoloured", vec![(1.0, 1.0)])],
        };
        let chart = Chart {
            title: "t",
            x_label: "x",
            y_label: "y",
            log_x: false,
            reference_y: None,
        };
        let err = panel_chart(&dir.path().join("c.png"), &chart, &[panel]).unwrap_err();
        assert!(
            err.to_string().contains("\"uncoloured\" has no colour"),
            "{err}"
        );
    }

    #[test]
    fn the_heat_colours_run_from_dark_to_light_and_grey_marks_no_value() {
        let luminance = |c: RGBColor| 0.299 * c.0 as f64 + 0.587 * c.1 as f64 + 0.114 * c.2 as f64;
        let ramp: Vec<f64> = [0.0, 0.25, 0.5, 0.75, 1.0]
            .into_iter()
            .map(|v| luminance(heat_colour(v)))
            .collect();
        assert!(ramp.windows(2).all(|w| w[0] < w[1]), "{ramp:?}");
        assert_eq!(heat_colour(f64::NAN), RGBColor(230, 230, 230));
    }

    #[test]
    fn a_heat_map_has_a_panel_per_arm_in_two_columns() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("heat.png");
        let panel = |title: &str| HeatPanel {
            title: title.into(),
            rows: vec!["0-1 n0".into(), "16-32 n0".into()],
            columns: vec!["k = 1".into(), "k = 2".into()],
            values: vec![vec![0.8, 0.6], vec![0.5, f64::NAN]],
        };
        heat_map(&path, "acceptance", &[panel("a"), panel("b"), panel("c")]).unwrap();
        assert_eq!(
            png_size(&path),
            (2 * HEAT_PANEL_SIZE.0, 2 * HEAT_PANEL_SIZE.1 + TITLE_HEIGHT)
        );
    }

    #[test]
    fn panels_fill_two_columns_and_as_many_rows_as_they_need() {
        assert_eq!(panel_grid(1), (1, 1));
        assert_eq!(panel_grid(2), (2, 1));
        assert_eq!(panel_grid(3), (2, 2));
        assert_eq!(panel_grid(6), (2, 3));
    }

    #[test]
    fn the_legend_names_each_colour_once_in_colour_order() {
        let (fixed, unmodified, fixed_again) = (
            series("fixed", 1),
            series("unmodified", 0),
            series("fixed", 1),
        );
        let entries = legend_entries(&[&fixed, &unmodified, &fixed_again]);
        assert_eq!(
            entries,
            vec![(0, "unmodified".to_string()), (1, "fixed".to_string())]
        );
    }

    #[test]
    fn a_chart_of_three_panels_is_two_panels_wide_and_two_high_beside_its_legend() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("speedup.png");
        let panels: Vec<Panel> = ["dflash", "eagle", "vanilla"]
            .iter()
            .map(|drafter| Panel {
                title: drafter.to_string(),
                series: vec![series("unmodified", 0), series("fixed", 1)],
            })
            .collect();
        let chart = Chart {
            title: "speed-up",
            x_label: "tokens",
            y_label: "ratio",
            log_x: true,
            reference_y: Some(1.0),
        };
        panel_chart(&path, &chart, &panels).unwrap();
        assert_eq!(
            png_size(&path),
            (
                2 * PANEL_SIZE.0 + LEGEND_WIDTH,
                2 * PANEL_SIZE.1 + TITLE_HEIGHT
            )
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file is left beside the chart"
        );
    }
}
