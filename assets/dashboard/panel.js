// One FaustBot plugin's frontend panel. The dashboard loads this page in a
// frame sandboxed without `allow-same-origin`, so the plugin's scripts run
// in an origin of their own: they cannot read the page's token or call the
// guarded routes with it. The files to load come in the fragment
// (`#plugin=<id>&js=<path>&css=<path>`), each one of that plugin's own
// frontend files; nothing else is loaded.
(function () {
  var params = new URLSearchParams(location.hash.slice(1));
  var id = params.get('plugin') || '';
  var prefix = '/faust/plugins/' + encodeURIComponent(id) + '/frontend/';
  var own = function (path) {
    return id && path.indexOf(prefix) === 0 && path.indexOf('..') < 0;
  };
  params.getAll('css').filter(own).forEach(function (path) {
    var link = document.createElement('link');
    link.rel = 'stylesheet';
    link.href = path;
    document.head.appendChild(link);
  });
  params.getAll('js').filter(own).forEach(function (path) {
    var script = document.createElement('script');
    script.src = path;
    script.async = false;
    document.head.appendChild(script);
  });
})();
