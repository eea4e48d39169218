// Node preload (`node --import ./tests/interop/loopback.mjs app.js`) that keeps
// third-party test servers on the loopback interface.
//
// Some reference servers (e.g. @modelcontextprotocol/server-everything) call
// `listen(port[, callback])`, which binds every interface. This patch inserts
// "127.0.0.1" as the host whenever `net.Server.prototype.listen` gets a port
// (number or numeric string) and no host:
//   listen(port)              -> listen(port, "127.0.0.1")
//   listen(port, cb)          -> listen(port, "127.0.0.1", cb)
//   listen(port, backlog, cb) -> listen(port, "127.0.0.1", backlog, cb)
//   listen() / listen(cb)     -> listen(0, "127.0.0.1"[, cb])
//   listen({ port })          -> listen({ port, host: "127.0.0.1" })
// Calls that already name a host, or pass a path (Unix socket) or a handle,
// are left alone. http/https servers inherit from net.Server, so Express's
// app.listen(port) is covered too.
import net from "node:net";

const LOOPBACK = "127.0.0.1";
const originalListen = net.Server.prototype.listen;

function isPort(value) {
  if (typeof value === "number") return Number.isInteger(value);
  return typeof value === "string" && /^\d+$/.test(value);
}

net.Server.prototype.listen = function listen(...args) {
  const [first] = args;
  if (isPort(first)) {
    const hostGiven = args.length > 1 && typeof args[1] === "string";
    if (!hostGiven) args.splice(1, 0, LOOPBACK);
  } else if (args.length === 0 || typeof first === "function") {
    args.unshift(0, LOOPBACK);
  } else if (first !== null && typeof first === "object" && "port" in first && first.host === undefined && first.path === undefined) {
    args[0] = { ...first, host: LOOPBACK };
  }
  return originalListen.apply(this, args);
};
