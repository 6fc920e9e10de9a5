(function () {
  var body = document.getElementById('panel-body');
  function show(id) {
    var t = document.getElementById('d-' + id);
    if (!t) return;
    body.replaceChildren(t.content.cloneNode(true));
    document.querySelectorAll('[data-cell]').forEach(function (e) {
      e.classList.toggle('sel', e.dataset.cell === id);
    });
  }
  document.addEventListener('click', function (ev) {
    var b = ev.target.closest('[data-cell]');
    if (!b) return;
    show(b.dataset.cell);
    history.replaceState(null, '', '#' + encodeURIComponent(b.dataset.cell));
  });
  if (location.hash.length > 1) show(decodeURIComponent(location.hash.slice(1)));
})();
