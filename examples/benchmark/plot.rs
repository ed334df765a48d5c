//! The plot of the report: throughput against backlog size (`<out>/throughput.svg`).

use std::path::Path;

use crate::report::{size, Results};

/// Dark, distinct line colours (Tableau 10 and a few more), readable on white.
const PALETTE: [plotters::style::RGBColor; 14] = [
    plotters::style::RGBColor(31, 119, 180),
    plotters::style::RGBColor(255, 127, 14),
    plotters::style::RGBColor(44, 160, 44),
    plotters::style::RGBColor(214, 39, 40),
    plotters::style::RGBColor(148, 103, 189),
    plotters::style::RGBColor(140, 86, 75),
    plotters::style::RGBColor(227, 119, 194),
    plotters::style::RGBColor(127, 127, 127),
    plotters::style::RGBColor(188, 189, 34),
    plotters::style::RGBColor(23, 190, 207),
    plotters::style::RGBColor(0, 0, 0),
    plotters::style::RGBColor(0, 0, 128),
    plotters::style::RGBColor(128, 0, 0),
    plotters::style::RGBColor(0, 100, 0),
];

/// One line of the plot: its name, its (backlog, msg/s) points, and whether it is a ceiling.
type Series = (String, Vec<(f64, f64)>, bool);

impl Results {
    /// Throughput against backlog size: one line per (store, keys, concurrency) and one per
    /// store's raw ceiling, both axes logarithmic (the rates span orders of magnitude).
    pub fn plot(&self, path: &Path) -> Result<(), String> {
        use plotters::prelude::*;
        let mut series: Vec<Series> = Vec::new();
        let mut push = |name: String, point: (f64, f64), raw: bool| match series
            .iter_mut()
            .find(|(n, _, _)| *n == name)
        {
            Some((_, points, _)) => points.push(point),
            None => series.push((name, vec![point], raw)),
        };
        for c in &self.ceilings {
            push(
                format!("{} raw SQL ceiling", c.store.label()),
                (c.backlog as f64, c.ceiling.rate()),
                true,
            );
        }
        for d in &self.drains {
            push(
                format!(
                    "{} relay, {}, c={}",
                    d.store.label(),
                    d.keys.label(),
                    d.concurrency
                ),
                (d.backlog as f64, d.drained.rate()),
                false,
            );
        }
        let points = series.iter().flat_map(|(_, p, _)| p.iter().copied());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, 0f64, f64::MAX, 0f64);
        for (x, y) in points {
            (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
        }
        if series.is_empty() {
            return Ok(());
        }
        let (x0, x1) = (x0 / 1.5, x1 * 1.5);
        // Headroom above the fastest line (the axis is logarithmic), where the legend goes
        // without covering a line.
        let (y0, y1) = ((y0 / 2.0).max(0.1), y1 * 40.0);
        let err = |e: DrawingAreaErrorKind<_>| format!("plot {}: {e}", path.display());
        let root = SVGBackend::new(path, (1000, 640)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "No-op drain msg/s against backlog size (load average at start: {})",
                    self.load_start
                        .split(' ')
                        .take(3)
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
                ("sans-serif", 20),
            )
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(72)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("backlog (messages)")
            .y_desc("msg/s")
            .x_label_formatter(&|x| size(*x as usize))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()
            .map_err(err)?;
        for (i, (name, mut points, raw)) in series.into_iter().enumerate() {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let color = PALETTE[i % PALETTE.len()].to_rgba();
            let width = if raw { 4 } else { 2 };
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(width)))
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
                });
            chart
                .draw_series(
                    points
                        .into_iter()
                        .map(|p| Circle::new(p, 3, color.filled())),
                )
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
        Ok(())
    }
}
