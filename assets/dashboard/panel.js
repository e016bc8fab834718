// One FaustBot plugin's frontend panel. The dashboard loads this page in a
// frame sandboxed without `allow-same-origin`, so the plugin's scripts run
// in an origin of their own: they cannot read the page's token or call the
// guarded routes with it. The files to load come in the fragment
// (`#plugin=<id>&js=<path>&css=<path>`), each one of that plugin's own
// frontend files; nothing else is loaded.
//
// FaustBot's config window hands a panel `window.pluginUI`; this page does
// the same: `registerPanel(id, title)` → the element to draw in, and the
// plugin's own `communicate` route. A call to that route (through
// `pluginUI.communicate(payload)` or a plain `fetch` of
// `/faust/plugins/<id>/communicate`) is passed to the dashboard, which makes
// it with the token and hands back the reply only: the token never enters
// this frame, and no other route is reachable from here.
(function () {
  var params = new URLSearchParams(location.hash.slice(1));
  var id = params.get('plugin') || '';
  var prefix = '/faust/plugins/' + encodeURIComponent(id) + '/frontend/';
  var route = '/faust/plugins/' + encodeURIComponent(id) + '/communicate';
  var own = function (path) {
    return id && path.indexOf(prefix) === 0 && path.indexOf('..') < 0;
  };

  var waiting = {};
  var next = 0;
  window.addEventListener('message', function (e) {
    var d = e.data;
    if (e.source !== window.parent || !d || d.ctxhost !== 'reply' || !waiting[d.n]) return;
    var w = waiting[d.n];
    delete waiting[d.n];
    w(d);
  });
  /** The plugin's communicate hook through the dashboard: `{status, body}`. */
  function ask(payload) {
    return new Promise(function (resolve) {
      var n = ++next;
      waiting[n] = resolve;
      window.parent.postMessage({ ctxhost: 'communicate', n: n, payload: payload }, '*');
    });
  }
  function communicate(payload) {
    return ask(payload).then(function (r) {
      if (r.status >= 200 && r.status < 300) return r.body;
      throw new Error((r.body && (r.body.error || r.body.detail)) || 'communicate answered ' + r.status);
    });
  }

  var ownFetch = window.fetch ? window.fetch.bind(window) : null;
  window.fetch = function (input, init) {
    var url;
    try {
      url = new URL(typeof input === 'string' ? input : input.url, location.href);
    } catch (e) {
      url = null;
    }
    var method = ((init && init.method) || (input && input.method) || 'GET').toUpperCase();
    if (!url || url.pathname !== route || method !== 'POST') {
      return ownFetch ? ownFetch(input, init) : Promise.reject(new TypeError('fetch is unavailable'));
    }
    var payload;
    try {
      payload = init && init.body ? JSON.parse(init.body) : {};
    } catch (e) {
      return Promise.reject(new TypeError('communicate: the body is not JSON'));
    }
    return ask(payload).then(function (r) {
      return new Response(JSON.stringify(r.body === undefined ? null : r.body), {
        status: r.status || 502,
        headers: { 'Content-Type': 'application/json' },
      });
    });
  };

  window.pluginUI = {
    baseUrl: '',
    pluginId: id,
    communicate: communicate,
    registerPanel: function (pluginId, title) {
      var section = document.createElement('section');
      section.className = 'plugin-panel';
      section.dataset.plugin = pluginId;
      var h = document.createElement('h2');
      h.textContent = title || pluginId;
      var body = document.createElement('div');
      section.appendChild(h);
      section.appendChild(body);
      (document.getElementById('plugin-panel') || document.body).appendChild(section);
      return body;
    },
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
