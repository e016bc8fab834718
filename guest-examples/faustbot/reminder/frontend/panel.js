// Reminder panel: lists pending reminders and adds new ones through the
// plugin's communicate route. Loaded by the FaustBot config window
// (window.pluginUI) from GET /faust/admin/plugins/assets.
(function () {
  "use strict";
  var PLUGIN_ID = "reminder";
  var ui = window.pluginUI;
  if (!ui) return; // only the config window has a panel
  var base = (ui.baseUrl || "") + "/faust/plugins/" + PLUGIN_ID + "/communicate";

  function call(payload) {
    return fetch(base, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(payload),
    }).then(function (r) { return r.json(); });
  }

  function render(root, reminders) {
    root.innerHTML = "";
    var list = document.createElement("ul");
    list.className = "reminder-list";
    reminders.forEach(function (r) {
      var li = document.createElement("li");
      li.textContent = r.text + " — " + new Date(r.due * 1000).toLocaleString();
      list.appendChild(li);
    });
    var input = document.createElement("input");
    input.placeholder = "Remind me to…";
    var add = document.createElement("button");
    add.textContent = "Add (in 60 s)";
    add.onclick = function () {
      call({ action: "remind", text: input.value, in_seconds: 60 }).then(refresh);
    };
    root.appendChild(list);
    root.appendChild(input);
    root.appendChild(add);
  }

  function refresh() {
    call({ action: "list" }).then(function (reply) {
      render(panel, reply.reminders || []);
    });
  }

  var panel = ui.registerPanel
    ? ui.registerPanel(PLUGIN_ID, "Reminders")
    : document.body.appendChild(document.createElement("div"));
  panel.classList.add("reminder-panel");
  refresh();
})();
