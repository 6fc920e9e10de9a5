(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('cells').textContent);
  var panel = document.getElementById('panel');
  var body = document.getElementById('panel-body');
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function dl(pairs) {
    var d = el('dl');
    pairs.forEach(function (p) { d.appendChild(el('dt', p[0])); d.appendChild(el('dd', p[1])); });
    return d;
  }
  // Sequence diagrams (see report/sequence.rs for the data): three lanes,
  // a harness action is an arrow to the runner, a provider message an arrow
  // between runner and provider (<- received, -> sent), anything else a dot
  // on its lane; the cut is a red line across, evidence rows are yellow.
  var SEQ = data.seq, decoded = {};
  var LANES = { H: 40, R: 250, P: 740 }, WIDTH = 780, ROW = 16, TOP = 28;
  function rowsOf(id) {
    if (decoded[id]) return decoded[id];
    var r = SEQ.cells[id];
    if (r === undefined) return null;
    if (typeof r === 'string') r = [0, r, null];
    var table = SEQ.tables[data.scenarios[data.cells[id][0]]];
    var rows = r[2] ? rowsOf(r[2]).slice(0, r[0]) : [];
    for (var i = 0; i < r[1].length; i += table.w) {
      var n = 0;
      for (var k = 0; k < table.w; k++) n = n * DIGITS.length + DIGITS.indexOf(r[1][i + k]);
      rows.push(table.labels[n]);
    }
    decoded[id] = rows;
    return rows;
  }
  var DIGITS = '!#$%()*+,-./0123456789:;=?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[]^_`abcdefghijklmnopqrstuvwxyz{|}~';
  function svg(tag, attrs, text) {
    var e = document.createElementNS('http://www.w3.org/2000/svg', tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function drawSequence(id) {
    var rows = rowsOf(id);
    if (!rows) return null;
    var ev = SEQ.ev[id] || [];
    var height = TOP + rows.length * ROW + 12;
    var s = svg('svg', { 'class': 'seqd', viewBox: '0 0 ' + WIDTH + ' ' + height, width: WIDTH,
      height: height, role: 'img', 'aria-label': 'sequence diagram of ' + id });
    [['harness', 'H'], ['runner', 'R'], ['provider', 'P']].forEach(function (l) {
      var x = LANES[l[1]];
      s.appendChild(svg('text', { x: x, y: 14, 'class': 'lane' }, l[0]));
      s.appendChild(svg('line', { x1: x, y1: 20, x2: x, y2: height, 'class': 'life' }));
    });
    rows.forEach(function (label, i) {
      var lane = label[0], cut = label[1] === '>', text = label.slice(2);
      var y = TOP + i * ROW + ROW / 2, from = LANES[lane], to = from;
      if (lane === 'H') to = LANES.R;
      else if (lane === 'P' && text.indexOf('<-') === 0) { from = LANES.R; to = LANES.P; text = text.slice(3); }
      else if (lane === 'P' && text.indexOf('->') === 0) { from = LANES.P; to = LANES.R; text = text.slice(3); }
      var g = svg('g', {});
      g.appendChild(svg('title', {}, text));
      if (ev.indexOf(i) >= 0) g.appendChild(svg('rect', { x: 0, y: y - ROW / 2, width: WIDTH, height: ROW, 'class': 'ev' }));
      if (cut) {
        g.appendChild(svg('line', { x1: 0, y1: y, x2: WIDTH, y2: y, 'class': 'cut' }));
        g.appendChild(svg('text', { x: 2, y: y - 2, 'class': 'cutl' }, 'cut'));
      }
      if (from === to) g.appendChild(svg('circle', { cx: from, cy: y, r: 3, 'class': 'dot' }));
      else {
        var tip = to > from ? to - 6 : to + 6;
        g.appendChild(svg('line', { x1: from, y1: y, x2: to, y2: y, 'class': 'msg' }));
        g.appendChild(svg('polygon', { points: to + ',' + y + ' ' + tip + ',' + (y - 3) + ' ' + tip + ',' + (y + 3), 'class': 'head' }));
      }
      // A harness label fits between harness and runner; a provider fact's
      // label ends at its lane.
      var fact = lane === 'P' && from === to;
      var t = svg('text', { x: fact ? LANES.P - 6 : Math.min(from, to) + 6, y: y - 2, 'class': 't' },
        text.slice(0, lane === 'H' ? 34 : 78));
      if (fact) t.setAttribute('text-anchor', 'end');
      g.appendChild(t);
      s.appendChild(g);
    });
    return s;
  }
  function drawSequences(root) {
    root.querySelectorAll('[data-seq]').forEach(function (d) {
      var s = drawSequence(d.dataset.seq);
      if (s) d.replaceChildren(s);
    });
  }
  // A passing cell's panel, from its compact record.
  function fromRecord(id, r) {
    var f = document.createDocumentFragment();
    var scenario = data.scenarios[r[0]];
    var cut = r[1] === null ? null : data.cuts[r[1]];
    var h = el('h3', id + ' ');
    h.appendChild(el('span', r[3], 'v ' + r[3]));
    f.appendChild(h);
    f.appendChild(el('p')).appendChild(el('code', scenario + '@' + (cut ? cut + '/' + r[2] : 'clean')));
    f.appendChild(dl([['scenario', scenario], ['cut', cut || 'none'], ['fault', r[2] || 'none'],
      ['seed', r[7]], ['duration', r[6] + ' ms']]));
    f.appendChild(el('h4', 'oracles'));
    f.appendChild(el('p', 'every oracle passed: ' + data.oracles.join(', '), 'muted'));
    f.appendChild(el('h4', 'outcome'));
    f.appendChild(dl([['state', r[4]], ['cause', r[5] || 'none'], ['reached cut', r[11]],
      ['runs', r[8]], ['continuations', r[9]], ['retry', r[10] === null ? 'none' : 'HTTP ' + r[10]]]));
    f.appendChild(el('h4', 'reproduce'));
    f.appendChild(el('pre', 'turncut replay <this report\'s directory>/' + id, 'cmd'));
    if (SEQ.cells[id]) {
      f.appendChild(el('h4', 'sequence'));
      f.appendChild(el('p', 'names only (a passing cell keeps no evidence; replay it with --keep ' +
        'for its files)', 'muted'));
      var d = el('div', null, 'seq');
      d.dataset.seq = id;
      f.appendChild(d);
    }
    return f;
  }
  function show(id) {
    var t = document.getElementById('d-' + id);
    var r = data.cells[id];
    if (t) body.replaceChildren(t.content.cloneNode(true));
    else if (r) body.replaceChildren(fromRecord(id, r));
    else return;
    drawSequences(body);
    panel.classList.add('open');
    document.querySelectorAll('.c.sel').forEach(function (e) { e.classList.remove('sel'); });
    document.querySelectorAll('[data-cell="' + id + '"]').forEach(function (e) { e.classList.add('sel'); });
  }
  document.addEventListener('click', function (ev) {
    var b = ev.target.closest('[data-cell]');
    if (!b) return;
    show(b.dataset.cell);
    history.replaceState(null, '', '#' + encodeURIComponent(b.dataset.cell));
  });
  document.getElementById('panel-close').addEventListener('click', function () {
    panel.classList.remove('open');
  });
  var filters = ['v', 'f', 'o', 'p'].map(function (k) { return document.getElementById('f-' + k); });
  // A grid's fault columns follow the fault filter's options (both in
  // Fault::ALL order, after the point column and the "all" option); a clean
  // cell carries an empty data-f.
  function faultOf(b) {
    if (b.dataset.f !== undefined) return b.dataset.f;
    var option = filters[1].options[b.parentNode.cellIndex];
    return option ? option.value : '';
  }
  function applyFilters() {
    var v = filters[0].value, f = filters[1].value, o = filters[2].value, p = filters[3].value;
    var shown = 0, all = 0;
    document.querySelectorAll('section.scenario').forEach(function (s) {
      var inProfile = !p || s.dataset.p === p;
      var visible = 0;
      s.querySelectorAll('.c').forEach(function (b) {
        all++;
        var on = inProfile && (!v || b.classList.contains(v)) && (!f || faultOf(b) === f) &&
          (!o || b.dataset.o === o);
        b.classList.toggle('off', !on);
        if (on) { shown++; visible++; }
      });
      s.hidden = visible === 0;
    });
    document.getElementById('shown').textContent = shown + ' of ' + all + ' cells shown';
  }
  filters.forEach(function (s) { s.addEventListener('change', applyFilters); });
  // A browser may restore filter values on reload; otherwise every cell is
  // shown and nothing needs touching.
  if (filters.some(function (s) { return s.value; })) applyFilters();
  else document.getElementById('shown').textContent = document.querySelectorAll('table.grid .c').length + ' cells';
  if (location.hash.length > 1) show(decodeURIComponent(location.hash.slice(1)));
})();
