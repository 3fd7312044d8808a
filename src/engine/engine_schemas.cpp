// Prompt Cache in the engine: schemas registered (encoded inside the steps:
// step_loop.cpp runs the slices, advance() below follows them), restored,
// saved, removed, and prompts built on them. The registry
// (schema_registry.h) holds the names and locks itself; pinning and
// unpinning happen on the engine thread.
#include "engine/engine_impl.h"
#include "engine/prompt_request.h"

namespace cs {

SchemaInfo Engine::register_schema(pml::Schema schema, const std::function<void(int, int)>& progress) {
  Impl& m = *impl_;
  auto job = std::make_shared<SchemaJob>();
  // Laid out here (a malformed schema throws before its name is taken).
  job->enc = std::make_unique<pml::SchemaEncoding>(std::move(schema), m.text, m.kv.layout(),
                                                   model_.config().n_heads);
  job->progress = progress;
  const std::string name = job->enc->name();
  m.registry.reserve(name);
  std::future<Outcome<SchemaInfo>> result = job->result.get_future();
  {
    std::lock_guard lock(m.mu);
    if (!m.stopping) {
      m.jobs.push_back(std::move(job));
      m.poked = true;
    }
  }
  if (job) {  // not queued
    m.registry.unreserve(name);
    throw Error("the engine has stopped", ErrorKind::kStopped);
  }
  m.cv.notify_all();
  return result.get().get();
}

SchemaInfo Engine::save_schema(const std::string& name, const std::string& dir) const {
  const Impl& m = *impl_;
  const std::shared_ptr<pml::EncodedSchema> e = m.registry.get(name);
  // Pinned chunks are written once, before the schema is published, and
  // never again while it is registered (held here): readable off the engine
  // thread.
  pml::save_schema(*e, m.kv.memory(), m.model_identity(), m.text.pad, dir);
  return info_of(*e);
}

SchemaInfo Engine::load_schema(const std::string& path) {
  Impl& m = *impl_;
  pml::SavedSchema saved = pml::read_saved_schema(path, m.model_identity(), m.kv.layout(), m.text.pad);
  const std::string name = saved.schema.name;
  m.registry.reserve(name);
  try {
    return m.on_engine_thread([&m, &saved] {
      std::shared_ptr<pml::EncodedSchema> e = pml::restore_schema(std::move(saved), m.kv, m.text);
      const SchemaInfo info = m.registry.publish(std::move(e));
      m.publish_stats();  // before the caller sees the result
      return info;
    });
  } catch (...) {
    m.registry.unreserve(name);
    throw;
  }
}

void Engine::unregister_schema(const std::string& name) {
  Impl& m = *impl_;
  m.on_engine_thread([&m, &name] {
    pml::release_schema(m.kv, *m.registry.remove(name));
    m.publish_stats();
  });
}

std::vector<SchemaInfo> Engine::schemas() const { return impl_->registry.list(); }

Request Engine::pml_request(const std::string& prompt_xml, bool use_cache, const std::string& file) const {
  const pml::Prompt p = pml::parse_prompt(prompt_xml, file);
  const std::shared_ptr<pml::EncodedSchema> e = impl_->registry.find(p.schema);
  if (!e) throw pml::PmlError(p.at, "the schema '" + p.schema + "' is not registered", ErrorKind::kNotFound);
  const pml::TextModel& tm = impl_->text;
  const pml::Assembly a = pml::assemble(e->layout, p, tm.encode, tm.roles, tm.reply_start);
  Request r = prompt_request(*e, a, use_cache);
  if (use_cache) r.pins = e;
  return r;
}

const pml::ModelIdentity& Engine::Impl::model_identity() const {
  std::call_once(identity_once, [this] { identity = pml::identify(model); });
  return identity;
}

void Engine::Impl::advance(SchemaJob& job) {
  pml::SchemaEncoding& enc = *job.enc;
  const int before = enc.done();
  try {
    if (!enc.finished()) enc.ran(kv);
  } catch (const Error& e) {
    fail_job(job, e.status());
    return;
  } catch (const std::exception& e) {  // bad_alloc: the engine goes on
    fail_job(job, {ErrorKind::kInternal, e.what(), {}});
    return;
  }
  counters.schema_tokens += uint64_t(enc.done() - before);
  if (job.progress && enc.done() > before) job.progress(enc.done(), enc.total());
  if (!enc.finished()) return;
  Outcome<SchemaInfo> o;
  o.value = registry.publish(enc.take());
  end_job(std::move(o));
}

void Engine::Impl::fail_job(SchemaJob& job, Status why) {
  job.enc->abandon(kv);
  registry.unreserve(job.enc->name());
  end_job(Outcome<SchemaInfo>::failed(std::move(why)));
}

void Engine::Impl::end_job(Outcome<SchemaInfo> o) {
  std::shared_ptr<SchemaJob> keep = encoding.front();
  encoding.pop_front();
  publish_stats();  // before the caller sees the result
  keep->result.set_value(std::move(o));
}

}  // namespace cs
