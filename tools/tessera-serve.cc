// tessera-serve: an HTTP server for a trained model (docs/inference.md), OpenAI-compatible and
// Megatron-compatible, on cpp-httplib.
//
//   tessera-serve --load DIR [--host 127.0.0.1] [--port 8000]
//
//   GET  /v1/models             the one model (its id: --served-model-name, else DIR's name)
//   POST /v1/completions        OpenAI's completions, streamed as Server-Sent Events with
//                               "stream": true ("data: {...}" chunks, then "data: [DONE]")
//   POST /v1/chat/completions   OpenAI's chat completions (the chat template: api_requests.h)
//   PUT  /api                   Megatron's text generation server
//   GET  /metrics               Prometheus metrics, named as vLLM's (serving_metrics.h)
//
// Requests run together in the engine's continuous batch (inference/serving.h); a bad request
// gets HTTP 400 with {"error": {"message", "type": "invalid_request_error", "param"}}, a full
// server 503; the server never stops on bad input. Text is never cut inside a UTF-8 character
// and a stop string is held back while streaming until it cannot match (text_output.h). A client
// that goes away mid-stream ends its generation (its cache blocks return to the pool).
//
// Under mpirun the ranks are one tensor-parallel group (`mpirun -np 2 tessera-serve ...`):
// rank 0 listens and runs the serving loop, every rank holds its shard of the weights and of the
// KV cache and decodes each step with it (serving.h). Bad flags: one line, exit code 2.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tessera/comm/process_group.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/memory.h"
#include "tessera/core/threads.h"
#include "tessera/core/tool_main.h"
#include "tessera/data/tokenizer.h"
#include "tessera/inference/api_requests.h"
#include "tessera/inference/chat_template.h"
#include "tessera/inference/inference_flags.h"
#include "tessera/inference/load_model.h"
#include "tessera/inference/serving.h"
#include "tessera/inference/serving_metrics.h"
#include "tessera/inference/text_output.h"
#include "tessera/kernels/build_info.h"
#include "tessera/parallel/tensor_parallel.h"

namespace {

using nlohmann::json;
using tessera::Error;
namespace inference = tessera::inference;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void fail(httplib::Response& res, int status, const std::string& message, const std::string& param,
          const char* type = "invalid_request_error") {
  res.status = status;
  res.set_content(dump({{"error",
                         {{"message", message},
                          {"type", type},
                          {"param", param.empty() ? json(nullptr) : json(param)},
                          {"code", nullptr}}}}),
                  "application/json");
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What the server shares between connection threads (all const but the loop, which locks).
struct Server {
  inference::ServingLoop* loop = nullptr;
  const tessera::data::Tokenizer* tokenizer = nullptr;
  const inference::ChatTemplate* chat = nullptr;
  int32_t eod = -1;
  std::string model_name;
  std::mt19937_64* seeds = nullptr;
  std::mutex* seeds_mu = nullptr;

  uint64_t next_seed() const {
    std::lock_guard<std::mutex> lock(*seeds_mu);
    return (*seeds)();
  }
  std::string piece(int32_t token) const {
    return tokenizer ? tokenizer->decode(std::vector<int32_t>{token}) : std::to_string(token);
  }
};

// One generation's tokens and text as they come, until it finished (or was refused).
struct Progress {
  std::vector<inference::GeneratedToken> tokens;
  inference::FinishReason finish = inference::FinishReason::kNone;
  std::string error;
};

// Runs one generation to its end: its tokens, its text (cut at a stop string, which ends it),
// its finish reason. `on_piece` (may be empty) receives the text as it becomes final.
struct Outcome {
  std::vector<inference::GeneratedToken> tokens;
  std::string text;
  inference::FinishReason finish = inference::FinishReason::kNone;
  std::string error;
};
Outcome run_to_end(const Server& s, const std::shared_ptr<inference::Stream>& stream,
                   const inference::GenerationRequest& request,
                   const std::vector<std::string>& stops,
                   const std::function<bool(const std::string&)>& on_piece) {
  Outcome out;
  std::unique_ptr<inference::TextOutput> text;
  if (s.tokenizer) text = std::make_unique<inference::TextOutput>(*s.tokenizer, stops);
  for (size_t seen = 0;;) {
    out.tokens = stream->wait(seen, out.finish, out.error);
    if (!out.error.empty()) return out;
    seen = out.tokens.size();
    bool stopped = false;
    if (text)
      stopped = text->update(inference::text_tokens(out.tokens, out.finish, request.stop_tokens));
    if (stopped) {
      stream->close();  // the generation ends at the next step
      out.finish = inference::FinishReason::kStop;
    }
    const bool done = out.finish != inference::FinishReason::kNone;
    if (text && on_piece) {
      const std::string piece = text->take(done);
      if (!piece.empty() && !on_piece(piece)) {  // the client is gone
        stream->close(inference::FinishReason::kAbort);
        out.error = "client disconnected";
        return out;
      }
    }
    if (done) {
      if (text) out.text = text->text();
      return out;
    }
  }
}

json usage(const inference::GenerationRequest& r, size_t completion) {
  const size_t prompt = r.prompt.size();
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

// OpenAI's legacy completions logprobs block.
json completion_logprobs(const Server& s, const std::vector<inference::GeneratedToken>& tokens) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = 0;
  for (const inference::GeneratedToken& t : tokens) {
    const std::string p = s.piece(t.token);
    toks.push_back(p);
    lps.push_back(t.logprob.logprob);
    json alt = json::object();
    for (const auto& [tok, lp] : t.logprob.top) alt[s.piece(tok)] = lp;
    tops.push_back(alt);
    offsets.push_back(offset);
    offset += p.size();
  }
  return {
      {"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json chat_logprobs(const Server& s, const std::vector<inference::GeneratedToken>& tokens) {
  json content = json::array();
  for (const inference::GeneratedToken& t : tokens) {
    json alt = json::array();
    for (const auto& [tok, lp] : t.logprob.top)
      alt.push_back({{"token", s.piece(tok)}, {"logprob", lp}});
    content.push_back(
        {{"token", s.piece(t.token)}, {"logprob", t.logprob.logprob}, {"top_logprobs", alt}});
  }
  return {{"content", content}};
}

// The request body through `parse`; false (and a 400 answered) when it is refused.
bool parse_body(httplib::Response& res, const std::function<void()>& parse) {
  try {
    parse();
    return true;
  } catch (const json::parse_error&) {
    fail(res, 400, "the request body is not valid JSON", "");
  } catch (const inference::RequestError& e) {
    fail(res, 400, e.what(), e.param);
  } catch (const Error& e) {
    fail(res, 400, e.what(), "");
  }
  return false;
}

void handle_openai(const Server& s, const httplib::Request& req, httplib::Response& res,
                   bool chat) {
  inference::ApiRequest api;
  const bool parsed = parse_body(res, [&] {
    const json body = json::parse(req.body);
    if (body.is_object() && body.contains("model") &&
        (!body["model"].is_string() || body["model"].get<std::string>() != s.model_name))
      throw inference::RequestError("model", "model: this server serves \"" + s.model_name + "\"");
    api = chat ? inference::parse_chat(body, s.tokenizer, s.eod, s.next_seed(), *s.chat)
               : inference::parse_completion(body, s.tokenizer, s.eod, s.next_seed());
  });
  if (!parsed) return;
  const inference::GenerationRequest request = api.generations[0];
  const std::shared_ptr<inference::Stream> stream = s.loop->submit(request);
  if (!stream)
    return fail(res, 503, "the server is at --max-concurrent-requests", "", "server_busy");
  // The first answer decides between an error and a stream.
  Progress first;
  first.tokens = stream->wait(0, first.finish, first.error);
  if (!first.error.empty()) return fail(res, 400, first.error, "prompt");
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(unix_now()) + "-" +
                         std::to_string(s.next_seed() % 1000000);
  const int64_t created = unix_now();
  const char* object = chat ? "chat.completion" : "text_completion";
  if (!api.stream) {
    const Outcome o = run_to_end(s, stream, request, api.stops, nullptr);
    if (!o.error.empty()) return fail(res, 400, o.error, "");
    json choice = {{"index", 0}, {"finish_reason", inference::finish_reason_name(o.finish)}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", o.text}};
      choice["logprobs"] = api.want_logprobs ? chat_logprobs(s, o.tokens) : json(nullptr);
    } else {
      choice["text"] = o.text;
      choice["logprobs"] = api.want_logprobs ? completion_logprobs(s, o.tokens) : json(nullptr);
    }
    res.set_content(dump({{"id", id},
                          {"object", object},
                          {"created", created},
                          {"model", s.model_name},
                          {"choices", json::array({choice})},
                          {"usage", usage(request, o.tokens.size())}}),
                    "application/json");
    return;
  }
  const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
  res.set_chunked_content_provider("text/event-stream", [s, stream, request, api, id, created, chat,
                                                         chunk_object](size_t,
                                                                       httplib::DataSink& sink) {
    const auto send = [&](const json& choice) {
      const std::string line = "data: " +
                               dump({{"id", id},
                                     {"object", chunk_object},
                                     {"created", created},
                                     {"model", s.model_name},
                                     {"choices", json::array({choice})}}) +
                               "\n\n";
      return sink.write(line.data(), line.size());
    };
    if (chat && !send({{"index", 0},
                       {"delta", {{"role", "assistant"}, {"content", ""}}},
                       {"finish_reason", nullptr}})) {
      stream->close(inference::FinishReason::kAbort);  // the client is gone
      return false;
    }
    const Outcome o = run_to_end(s, stream, request, api.stops, [&](const std::string& piece) {
      return chat
                 ? send({{"index", 0}, {"delta", {{"content", piece}}}, {"finish_reason", nullptr}})
                 : send({{"index", 0}, {"text", piece}, {"finish_reason", nullptr}});
    });
    if (!o.error.empty()) return false;
    json last = {{"index", 0}, {"finish_reason", inference::finish_reason_name(o.finish)}};
    if (chat)
      last["delta"] = json::object();
    else
      last["text"] = "";
    if (!send(last)) return false;
    const std::string done = "data: [DONE]\n\n";
    sink.write(done.data(), done.size());
    sink.done();
    return true;
  });
}

void handle_megatron(const Server& s, const httplib::Request& req, httplib::Response& res) {
  inference::ApiRequest api;
  if (!parse_body(res, [&] {
        api = inference::parse_megatron(json::parse(req.body), s.tokenizer, s.eod, s.next_seed());
      }))
    return;
  std::vector<std::shared_ptr<inference::Stream>> streams;
  for (const inference::GenerationRequest& g : api.generations) {
    streams.push_back(s.loop->submit(g));
    if (!streams.back()) {
      for (auto& st : streams)
        if (st) st->close();
      return fail(res, 503, "the server is at --max-concurrent-requests", "", "server_busy");
    }
  }
  json texts = json::array(), tokens = json::array(), logprobs = json::array();
  for (size_t i = 0; i < streams.size(); ++i) {
    const Outcome o = run_to_end(s, streams[i], api.generations[i], {}, nullptr);
    if (!o.error.empty()) {
      for (auto& st : streams) st->close();
      return fail(res, 400, "prompts[" + std::to_string(i) + "]: " + o.error, "prompts");
    }
    std::vector<int32_t> all = api.generations[i].prompt;
    json lps = json::array();
    for (const inference::GeneratedToken& t : o.tokens) {
      all.push_back(t.token);
      lps.push_back(t.logprob.logprob);
    }
    texts.push_back(s.tokenizer ? s.tokenizer->decode(api.generations[i].prompt) + o.text : "");
    tokens.push_back(all);
    logprobs.push_back(lps);
  }
  json out = {{"text", texts}, {"tokens", tokens}};
  if (api.want_logprobs) out["logprobs"] = logprobs;
  res.set_content(dump(out), "application/json");
}

// Where the chat template came from, for the start-up line.
std::string chat_template_origin;

// --chat-template's file, else tokenizer_config.json's template beside the weights, else the
// default (chat_template.h). A template that does not parse: tessera::Error naming the file.
inference::ChatTemplate load_chat_template(const std::string& file,
                                           const inference::LoadedModel& loaded) {
  std::string where;
  try {
    nlohmann::json config = nlohmann::json::object();
    if (!loaded.tokenizer_config_json.empty()) {
      where = loaded.tokenizer_config_json;
      config = nlohmann::json::parse(tessera::read_file(where, "tokenizer config"));
      if (!config.is_object()) throw Error("expected a JSON object");
    }
    if (!file.empty()) {
      where = file;
      chat_template_origin = "chat template " + file;
      return inference::ChatTemplate(tessera::read_file(file, "chat template"),
                                     inference::special_tokens_from_config(config));
    }
    inference::ChatTemplate chat = inference::ChatTemplate::from_tokenizer_config(config);
    chat_template_origin =
        chat.is_default() ? "the default chat template" : "chat template of " + where;
    return chat;
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": " + e.what());
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  inference::InferenceFlags flags;
  std::string host = "127.0.0.1", name, chat_template_file;
  int port = 8000, max_requests = 64;
  double timeout_s = 600;
  CLI::App app(
      "Serve a Tessera checkpoint or Hugging Face model over HTTP (OpenAI and Megatron APIs)");
  app.set_version_flag("--version", tessera::kernels::version_line);
  inference::add_inference_flags(app, flags);
  app.add_option("--host", host, "address to listen on")->capture_default_str();
  app.add_option("--port", port, "port")->check(CLI::Range(1, 65535))->capture_default_str();
  app.add_option("--served-model-name", name, "the model's id in the API (default: DIR's name)");
  app.add_option("--chat-template", chat_template_file,
                 "a Jinja chat template file (default: tokenizer_config.json's beside the weights)")
      ->check(CLI::ExistingFile);
  app.add_option("--max-concurrent-requests", max_requests,
                 "requests queued or running at once (more get 503)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--request-timeout", timeout_s, "seconds a request may run (then it ends)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  const int rc = tessera::run_tool(app, argc, argv, "tessera-serve", [&] {
    // The ranks of the job (one without mpirun) are the tensor-parallel group; an error on any
    // is the job's, reported once.
    std::shared_ptr<tessera::comm::ProcessGroup> world = tessera::comm::ProcessGroup::world();
    return tessera::comm::run_on_ranks(*world, "tessera-serve", [&] {
      tessera::parallel::TensorParallel tp;
      if (world->size() > 1) tp = tessera::parallel::TensorParallel(world, false);
      tessera::set_num_threads(flags.threads);
      inference::LoadedModel loaded = inference::load_for_inference(flags, tp);
      if (world->rank() != 0) {  // decodes step for step with rank 0, which serves
        inference::follow_serving(*loaded.model, flags.engine);
        return 0;
      }
      const std::unique_ptr<tessera::data::Tokenizer> tokenizer =
          inference::make_tokenizer(flags, loaded);
      if (name.empty())
        name = std::filesystem::path(flags.load).lexically_normal().filename().string();
      if (name.empty())
        name =
            std::filesystem::path(flags.load).lexically_normal().parent_path().filename().string();
      const inference::ChatTemplate chat = load_chat_template(chat_template_file, loaded);
      std::mt19937_64 seeds(std::random_device{}());
      std::mutex seeds_mu;
      inference::ServingLoop loop(*loaded.model, flags.engine, max_requests, timeout_s);
      Server s;
      s.loop = &loop;
      s.tokenizer = tokenizer.get();
      s.chat = &chat;
      if (tokenizer) {
        try {
          s.eod = tokenizer->eod();
        } catch (const Error&) {
        }
      }
      s.model_name = name;
      s.seeds = &seeds;
      s.seeds_mu = &seeds_mu;

      httplib::Server http;
      // A connection holds a pool thread while it is open (kept alive between requests too), and
      // cpp-httplib's default pool is 8 threads: a ninth client waited for a kept-alive connection
      // to time out (measured: 3 s to the first token with 8 streaming clients). One thread per
      // request the server admits, and a few for /metrics and refusals.
      http.new_task_queue = [max_requests] {
        return new httplib::ThreadPool(static_cast<size_t>(max_requests) + 8);
      };
      http.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
        res.set_content(dump({{"object", "list"},
                              {"data", json::array({{{"id", s.model_name},
                                                     {"object", "model"},
                                                     {"created", unix_now()},
                                                     {"owned_by", "tessera"}}})}}),
                        "application/json");
      });
      http.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) {
        handle_openai(s, req, res, false);
      });
      http.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
        handle_openai(s, req, res, true);
      });
      http.Put("/api", [&](const httplib::Request& req, httplib::Response& res) {
        handle_megatron(s, req, res);
      });
      http.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
        res.set_content(inference::prometheus_metrics(
                            loop.stats(), tessera::MemoryAccountant::instance().snapshot(),
                            tessera::process_resident_bytes(), s.model_name),
                        "text/plain; version=0.0.4");
      });
      http.set_exception_handler(
          [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
            std::string what = "internal error";
            try {
              std::rethrow_exception(ep);
            } catch (const std::exception& e) {
              what = e.what();
            } catch (...) {
            }
            fail(res, 500, what, "", "server_error");
          });
      // SO_REUSEADDR only: cpp-httplib 0.11 also sets SO_REUSEPORT, with which a second server
      // binds a port already served and the kernel splits the connections between the two.
      http.set_socket_options([](socket_t sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      });
      if (!http.bind_to_port(host, port)) {
        const std::string why =
            "--host " + host + " --port " + std::to_string(port) + ": cannot listen there";
        throw Error(why);  // the other ranks wait for rank 0's plans: run_on_ranks ends them too
      }
      std::printf("tessera-serve: %s (%s, %s) on http://%s:%d\n", s.model_name.c_str(),
                  loaded.source.c_str(), chat_template_origin.c_str(), host.c_str(), port);
      std::fflush(stdout);
      http.listen_after_bind();
      return 0;
    });
  });
  tessera::comm::shutdown();
  return rc;
}
