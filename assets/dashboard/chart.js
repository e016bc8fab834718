// Small time-series charts in inline SVG: one line per series over a
// shared time axis, scaled to the series' own maximum.

import { svg } from './dom.js';

/**
 * spark(points, {label, width, height, unit})
 * `points` are [t, value] pairs, oldest first (t in any unit, increasing).
 */
export function spark(points, options = {}) {
  const width = options.width || 160;
  const height = options.height || 32;
  const pad = 2;
  const values = points.map((p) => Number(p[1]) || 0);
  const max = Math.max(1e-9, ...values);
  const last = values.length ? values[values.length - 1] : 0;
  const unit = options.unit || '';
  const label = `${options.label || 'series'}: last ${fmt(last)}${unit}, max ${fmt(values.length ? max : 0)}${unit}`;
  const root = svg('svg', {
    class: 'spark',
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: 'img',
    'aria-label': label,
  });
  root.appendChild(svg('title', {}, label));
  if (points.length < 2) {
    root.appendChild(svg('line', { x1: pad, x2: width - pad, y1: height - pad, y2: height - pad, class: 'axis' }));
    return root;
  }
  const t0 = points[0][0];
  const span = Math.max(1e-9, points[points.length - 1][0] - t0);
  const xy = points.map((p, i) => {
    const x = pad + ((p[0] - t0) / span) * (width - 2 * pad);
    const y = height - pad - (values[i] / max) * (height - 2 * pad);
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  });
  root.appendChild(svg('line', { x1: pad, x2: width - pad, y1: height - pad, y2: height - pad, class: 'axis' }));
  root.appendChild(svg('polyline', { points: xy.join(' '), class: options.tone ? `line ${options.tone}` : 'line' }));
  return root;
}

function fmt(n) {
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}
