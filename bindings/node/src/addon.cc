// addon.cc: the thin N-API layer between JavaScript and libsandtrap.so.
//
// Everything crosses as msgpack bytes (docs/protocol.md); this file never looks
// inside them. Option mapping, validation messages and result objects live in
// lib/*.js. sandtrap_sandbox_exec, which blocks for as long as the sandboxed
// program runs, runs on a thread of its own (see "exec" below), so the event loop
// never blocks and neither does the libuv thread pool.
//
// Exports:
//   version()                       -> {version, abi, headerAbi}
//   probe()                         -> Buffer (msgpack map)
//   statusName(code)                -> string
//   newSandbox(policy: Uint8Array)  -> handle (throws {code, status, message, problems})
//   sandboxId(handle)               -> number
//   exec(handle, req, [handles])    -> Promise<Buffer> (msgpack response)
//   cancel(handle, tag|null)        -> number of operations cancelled
//   free(handle)                    -> undefined (idempotent)
//   confine(handle, withSeccomp)    -> undefined (throws on failure)
//
// Lifetime: a handle owns one reference to its sandtrap_sandbox; every exec in
// flight holds one more on each sandbox it touches (the called one and every
// pipeline stage's). sandtrap_sandbox_free runs when the last reference goes, so
// it never waits for runs in flight (which would block the event loop), and a
// sandbox named as a pipeline stage cannot disappear under the pipeline.
// Reference counts are touched on the JS thread only.

#include <napi.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "sandtrap.h"

namespace {

const napi_type_tag kHandleTag = {0x5a4e4454524150ULL, 0x73616e6474726170ULL};

struct Handle {
  sandtrap_sandbox* sb = nullptr;
  uint64_t id = 0;
  uint32_t sb_refs = 1;   // references to sb: the open handle + execs in flight
  uint32_t obj_refs = 1;  // references to this struct: the JS value + execs in flight
  bool closed = false;    // free() was called or the JS value was collected

  void Retain() {
    sb_refs++;
    obj_refs++;
  }
  void Release() {
    DropSandbox();
    if (--obj_refs == 0) delete this;
  }
  // free(): drop the open handle's reference to the sandbox (once).
  void Close() {
    if (!closed) {
      closed = true;
      DropSandbox();
    }
  }
  // The JS value was garbage-collected.
  void Finalize() {
    Close();
    if (--obj_refs == 0) delete this;
  }

 private:
  void DropSandbox() {
    if (--sb_refs == 0) {
      sandtrap_sandbox_free(sb);
      sb = nullptr;
    }
  }
};

Napi::Error StatusError(Napi::Env env, int status, const std::string& message) {
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, sandtrap_status_name(status)));
  err.Set("status", Napi::Number::New(env, status));
  return err;
}

// The error of a failed call from its sandtrap_error (then freed): the message, and
// `problems`, every problem as {field, message} (engine names: lib/ renames them).
Napi::Error StatusError(Napi::Env env, int status, sandtrap_error* e) {
  std::string message = sandtrap_error_message(e) ? sandtrap_error_message(e) : sandtrap_status_name(status);
  Napi::Error err = StatusError(env, status, message);
  size_t n = sandtrap_error_problem_count(e);
  Napi::Array problems = Napi::Array::New(env, n);
  for (size_t i = 0; i < n; i++) {
    Napi::Object p = Napi::Object::New(env);
    p.Set("field", Napi::String::New(env, sandtrap_error_problem_field(e, i)));
    p.Set("message", Napi::String::New(env, sandtrap_error_problem_message(e, i)));
    problems.Set(static_cast<uint32_t>(i), p);
  }
  err.Set("problems", problems);
  sandtrap_error_free(e);
  return err;
}

// The Handle behind a JS handle value; throws a TypeError for anything else.
Handle* GetHandle(const Napi::Value& v, bool allow_closed = false) {
  Napi::Env env = v.Env();
  if (!v.IsExternal() || !v.As<Napi::External<Handle>>().CheckTypeTag(&kHandleTag)) {
    throw Napi::TypeError::New(env, "not a sandtrap sandbox handle");
  }
  Handle* h = v.As<Napi::External<Handle>>().Data();
  if (h->closed && !allow_closed) {
    throw StatusError(env, SANDTRAP_E_CLOSED, std::string("the sandbox is closed"));
  }
  return h;
}

Napi::Uint8Array GetBytes(const Napi::Value& v, const char* what) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throw Napi::TypeError::New(v.Env(), std::string(what) + " must be a Uint8Array or Buffer");
  }
  return v.As<Napi::Uint8Array>();
}

Napi::Value Version(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("version", sandtrap_version());
  o.Set("abi", sandtrap_abi_version());
  o.Set("headerAbi", SANDTRAP_ABI_VERSION);
  return o;
}

Napi::Value StatusName(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), sandtrap_status_name(info[0].ToNumber().Int32Value()));
}

void FreeBuffer(Napi::Env, uint8_t* data) { sandtrap_buffer_free(data); }

Napi::Value Probe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint8_t* out = nullptr;
  size_t len = 0;
  int st = sandtrap_probe(&out, &len);
  if (st != SANDTRAP_OK || out == nullptr) {
    sandtrap_buffer_free(out);
    throw StatusError(env, st, std::string("sandtrap_probe: ") + sandtrap_status_name(st));
  }
  return Napi::Buffer<uint8_t>::NewOrCopy(env, out, len, FreeBuffer);
}

// sandtrap_profile: [status, response buffer] (the response holds the error, whose
// problems carry file and line: lib/profile.js shapes them)
Napi::Value Profile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Uint8Array req = GetBytes(info[0], "request");
  uint8_t* out = nullptr;
  size_t len = 0;
  int st = sandtrap_profile(req.Data(), req.ByteLength(), &out, &len);
  if (out == nullptr) {
    throw StatusError(env, st, std::string("sandtrap_profile: ") + sandtrap_status_name(st));
  }
  Napi::Array r = Napi::Array::New(env, 2);
  r.Set(uint32_t(0), Napi::Number::New(env, st));
  r.Set(uint32_t(1), Napi::Buffer<uint8_t>::NewOrCopy(env, out, len, FreeBuffer));
  return r;
}

Napi::Value NewSandbox(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Uint8Array policy = GetBytes(info[0], "policy");
  sandtrap_sandbox* sb = nullptr;
  sandtrap_error* err = nullptr;
  int st = sandtrap_sandbox_new(policy.Data(), policy.ByteLength(), &sb, &err);
  if (st != SANDTRAP_OK) {
    throw StatusError(env, st, err);
  }
  sandtrap_error_free(err);
  Handle* h = new Handle();
  h->sb = sb;
  h->id = sandtrap_sandbox_id(sb);
  auto ext = Napi::External<Handle>::New(env, h, [](Napi::Env, Handle* h) { h->Finalize(); });
  ext.TypeTag(&kHandleTag);
  return ext;
}

Napi::Value SandboxId(const Napi::CallbackInfo& info) {
  Handle* h = GetHandle(info[0]);
  return Napi::Number::New(info.Env(), static_cast<double>(h->id));
}

// ---- exec ---------------------------------------------------------------------
// Each exec blocks a thread for as long as the sandboxed program runs (seconds,
// minutes). On the libuv pool (4 threads by default) four long runs would stall
// every fs, dns and crypto call of the host and queue every further run, so each
// exec gets a thread of its own; the JS layer bounds how many run at once (the Go
// runtime aborts the process beyond 10000 threads). The result comes back to the
// JS thread through a thread-safe function, which also keeps the event loop alive
// while the run is in flight, exactly like an AsyncWorker would.

struct ExecJob;
void ExecDone(Napi::Env env, Napi::Function, void*, ExecJob* job);
using ExecTsfn = Napi::TypedThreadSafeFunction<void, ExecJob, ExecDone>;

struct ExecJob {
  explicit ExecJob(Napi::Env env) : deferred(Napi::Promise::Deferred::New(env)) {}
  ~ExecJob() { sandtrap_buffer_free(resp); }

  Napi::Promise::Deferred deferred;
  std::vector<Handle*> handles;  // retained; released on the JS thread
  std::vector<uint8_t> req;
  int status = SANDTRAP_E_INTERNAL;
  uint8_t* resp = nullptr;
  size_t resp_len = 0;
  ExecTsfn tsfn;
};

// On the JS thread (env is null when the environment is being torn down).
void ExecDone(Napi::Env env, Napi::Function, void*, ExecJob* raw) {
  std::unique_ptr<ExecJob> job(raw);
  for (Handle* h : job->handles) h->Release();
  job->handles.clear();
  if (env == nullptr) return;
  if (job->resp == nullptr) {
    job->deferred.Reject(
        StatusError(env, job->status, std::string("sandtrap_sandbox_exec: ") + sandtrap_status_name(job->status))
            .Value());
    return;
  }
  uint8_t* resp = job->resp;
  job->resp = nullptr;
  job->deferred.Resolve(Napi::Buffer<uint8_t>::NewOrCopy(env, resp, job->resp_len, FreeBuffer));
}

void ExecThread(ExecJob* job) {
  job->status = sandtrap_sandbox_exec(job->handles[0]->sb, job->req.data(), job->req.size(), &job->resp, &job->resp_len);
  // job may be gone as soon as it is handed over: keep our own copy of the tsfn
  ExecTsfn tsfn = job->tsfn;
  if (tsfn.BlockingCall(job) != napi_ok) {
    // the environment is shutting down and will never call ExecDone: the engine's
    // buffer is freed; the handles' references go with the process
    delete job;
  }
  tsfn.Release();
}

Napi::Value Exec(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<Handle*> handles{GetHandle(info[0])};
  Napi::Uint8Array req = GetBytes(info[1], "request");
  if (info.Length() > 2 && !info[2].IsUndefined()) {
    if (!info[2].IsArray()) throw Napi::TypeError::New(env, "keepAlive must be an array of handles");
    Napi::Array extra = info[2].As<Napi::Array>();
    for (uint32_t i = 0; i < extra.Length(); i++) handles.push_back(GetHandle(extra.Get(i)));
  }
  auto* job = new ExecJob(env);
  Napi::Promise promise = job->deferred.Promise();
  job->req.assign(req.Data(), req.Data() + req.ByteLength());
  job->handles = std::move(handles);
  for (Handle* h : job->handles) h->Retain();
  try {
    job->tsfn = ExecTsfn::New(env, "sandtrap.exec", 0, 1);
    std::thread(ExecThread, job).detach();
  } catch (const std::exception& e) {
    // no thread (EAGAIN) or no tsfn: nothing ran
    if (job->tsfn) job->tsfn.Release();
    for (Handle* h : job->handles) h->Release();
    job->handles.clear();
    job->deferred.Reject(StatusError(env, SANDTRAP_E_INTERNAL, std::string("cannot start a thread: ") + e.what()).Value());
    delete job;
  }
  return promise;
}

Napi::Value Cancel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info[0], true);
  if (h->sb == nullptr) return Napi::Number::New(env, 0);  // closed, nothing in flight
  int n;
  if (info.Length() < 2 || info[1].IsNull() || info[1].IsUndefined()) {
    n = sandtrap_sandbox_cancel(h->sb, nullptr);
  } else {
    std::string tag = info[1].ToString().Utf8Value();
    n = sandtrap_sandbox_cancel(h->sb, tag.c_str());
  }
  return Napi::Number::New(env, n);
}

Napi::Value Free(const Napi::CallbackInfo& info) {
  GetHandle(info[0], true)->Close();
  return info.Env().Undefined();
}

Napi::Value Confine(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Handle* h = GetHandle(info[0]);
  sandtrap_error* err = nullptr;
  int st = sandtrap_confine(h->sb, info[1].ToBoolean().Value() ? 1 : 0, &err);
  if (st != SANDTRAP_OK) throw StatusError(env, st, err);
  sandtrap_error_free(err);
  return env.Undefined();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("version", Napi::Function::New(env, Version, "version"));
  exports.Set("probe", Napi::Function::New(env, Probe, "probe"));
  exports.Set("profile", Napi::Function::New(env, Profile, "profile"));
  exports.Set("statusName", Napi::Function::New(env, StatusName, "statusName"));
  exports.Set("newSandbox", Napi::Function::New(env, NewSandbox, "newSandbox"));
  exports.Set("sandboxId", Napi::Function::New(env, SandboxId, "sandboxId"));
  exports.Set("exec", Napi::Function::New(env, Exec, "exec"));
  exports.Set("cancel", Napi::Function::New(env, Cancel, "cancel"));
  exports.Set("free", Napi::Function::New(env, Free, "free"));
  exports.Set("confine", Napi::Function::New(env, Confine, "confine"));
  return exports;
}

}  // namespace

NODE_API_MODULE(sandtrap, Init)
