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
    f.appendChild(el('p', 'Only cells that did not pass keep their evidence and sequence diagram; ' +
      'replay this one with --keep to see its files.', 'muted'));
    return f;
  }
  function show(id) {
    var t = document.getElementById('d-' + id);
    var r = data.cells[id];
    if (t) body.replaceChildren(t.content.cloneNode(true));
    else if (r) body.replaceChildren(fromRecord(id, r));
    else return;
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
  function applyFilters() {
    var v = filters[0].value, f = filters[1].value, o = filters[2].value, p = filters[3].value;
    var shown = 0, all = 0;
    document.querySelectorAll('section.scenario').forEach(function (s) {
      var inProfile = !p || s.dataset.p === p;
      var visible = 0;
      s.querySelectorAll('.c').forEach(function (b) {
        all++;
        var on = inProfile && (!v || b.classList.contains(v)) && (!f || b.dataset.f === f) &&
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
