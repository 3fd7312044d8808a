// `chunkserve info`'s description: exact figures for a tiny model, and the
// reasons a file does not run, found without failing to read it.
#include "model/model_info.h"

#include <gtest/gtest.h>

#include "gguf_writer.h"
#include "tiny_model.h"

namespace cs {
namespace {

TEST(ModelInfo, DescribesATinyQwen3) {
  const ModelInfo m = describe_model(test::tiny_model("tiny_qwen3", test::tiny_arch_shape("qwen3")));
  EXPECT_EQ(m.arch, "qwen3");
  EXPECT_EQ(m.n_layers, 2);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_EQ(m.n_vocab, 271);
  // 2 layers x 1 K/V head x 128 dims x (K and V) x 2 bytes.
  EXPECT_EQ(m.kv_bytes_per_token, 2u * 1 * 128 * 2 * 2);
  // Embedding 271 x 128, norms, and per layer q (256 x 128), k, v (128 x
  // 128), o (128 x 256), FFN 3 x 128 x 256, two norms of 128 and Q/K norms of 128.
  const uint64_t per_layer = 256 * 128 + 2 * 128 * 128 + 128 * 256 + 3 * 128 * 256 + 2 * 128 + 2 * 128;
  EXPECT_EQ(m.params, 271u * 128 + 128 + 2 * per_layer);
  ASSERT_EQ(m.types.size(), 1u);
  EXPECT_EQ(m.types[0].type, "F32");
  EXPECT_EQ(m.types[0].bytes, 4 * m.params);
  EXPECT_TRUE(m.problems.empty()) << m.problems[0];
  const std::string text = format_model_info(m);
  EXPECT_NE(text.find("architecture   qwen3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("RoPE           base 1000000, half-apart pairs, all 128 dims\n"), std::string::npos) << text;
  EXPECT_NE(text.find("runs           yes\n"), std::string::npos) << text;
}

TEST(ModelInfo, NamesWhatDoesNotRun) {
  test::GgufWriter w;
  w.kv_str("general.architecture", "mamba");
  w.kv_str("tokenizer.ggml.model", "bert");
  w.tensor("token_embd.weight", {256, 4}, 17, 0);  // IQ2_XS
  w.data(std::vector<uint8_t>(4 * 74));
  const ModelInfo m = describe_model(w.write("info_mamba.gguf"));
  ASSERT_EQ(m.types.size(), 1u);
  EXPECT_EQ(m.types[0].type, "IQ2_XS");
  EXPECT_FALSE(m.types[0].supported);
  EXPECT_EQ(m.params, 1024u);
  ASSERT_GE(m.problems.size(), 3u);
  EXPECT_EQ(m.problems[0], "architecture 'mamba' is not supported (supported: llama, qwen2, qwen3, gemma3, gemma2, qwen3moe, gpt-oss, olmo2, glm4, phi3, mistral3, smollm3, granite)");
  EXPECT_EQ(m.problems[1], "1 tensor of type IQ2_XS, which chunkserve does not read");
  EXPECT_EQ(m.problems[2], "tokenizer 'bert' is not supported (supported: gpt2, llama)");
  EXPECT_NE(format_model_info(m).find("runs           no:\n  - architecture 'mamba'"), std::string::npos);
}

// Gemma 2's soft-capping: the scores' cap on the attention line, the
// logits' on a line of its own (and neither for other models).
TEST(ModelInfo, SaysWhatIsSoftCapped) {
  const ModelInfo g = describe_model(test::tiny_model("info_gemma2", test::tiny_arch_shape("gemma2")));
  ASSERT_TRUE(g.problems.empty()) << g.problems[0];
  const std::string text = format_model_info(g);
  EXPECT_NE(text.find("attention      2 heads, 1 K/V heads, head dim 128; 2 of 4 layers slide over 24 positions; "
                      "scores soft-capped at 3 (c tanh(s / c))\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("logits         soft-capped at 1.5\n"), std::string::npos) << text;
  const std::string other = format_model_info(describe_model(test::tiny_model("info_gemma3", test::tiny_arch_shape("gemma3"))));
  EXPECT_EQ(other.find("soft-capped"), std::string::npos) << other;
}

// What turns positions, where it depends on the context or the layer.
TEST(ModelInfo, SaysHowPositionsTurn) {
  const ModelInfo phi = describe_model(test::tiny_model("info_phi3", test::tiny_arch_shape("phi3")));
  EXPECT_EQ(phi.rope,
            "base 10000, half-apart pairs, 64 of 96 dims, LongRoPE: short factors up to 256 positions of context, "
            "long ones beyond (--ctx decides; the trained context turns with the long ones)");
  const ModelInfo smol = describe_model(test::tiny_model("info_smollm3", test::tiny_arch_shape("smollm3")));
  EXPECT_EQ(smol.rope, "base 10000, adjacent pairs, all 64 dims, every 4th layer none (NoPE)");
  const ModelInfo mistral = describe_model(test::tiny_model("info_mistral3", test::tiny_arch_shape("mistral3")));
  EXPECT_EQ(mistral.rope, "base 1000000, adjacent pairs, all 64 dims, YaRN x4, queries tempered past 16 positions");
}

// What only the loader catches is reported from the loader.
TEST(ModelInfo, ReportsTheLoadersError) {
  test::TinyModelShape s = test::tiny_arch_shape("qwen2");
  s.arch_tensors = false;
  const ModelInfo m = describe_model(test::tiny_model("info_bare_qwen2", s));
  ASSERT_EQ(m.problems.size(), 1u);
  EXPECT_NE(m.problems[0].find("tensor 'blk.0.attn_q.bias' is missing"), std::string::npos) << m.problems[0];
}

}  // namespace
}  // namespace cs
