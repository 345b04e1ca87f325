/*
 * converge.ed25519: Ed25519 signature verification for the Lua client, through OpenSSL's
 * one-shot EVP_DigestVerify (the only way OpenSSL verifies Ed25519). luaossl 20220711, the
 * OpenSSL binding Debian packages, binds only the digest-context form of verify, which OpenSSL
 * refuses for Ed25519 ("operation not supported for this keytype"); no other Lua binding with
 * Ed25519 is packaged. So this module binds exactly one function:
 *
 *     local ed25519 = require "converge.ed25519"
 *     ed25519.verify(public_key_32_bytes, signature_64_bytes, message) -> true | false
 *
 * Wrong lengths are false, never an error; an OpenSSL failure to build the key raises.
 */
#include <lua.h>
#include <lauxlib.h>
#include <openssl/evp.h>
#include <openssl/err.h>

static int verify(lua_State *L)
{
    size_t klen, slen, mlen;
    const unsigned char *key = (const unsigned char *)luaL_checklstring(L, 1, &klen);
    const unsigned char *sig = (const unsigned char *)luaL_checklstring(L, 2, &slen);
    const unsigned char *msg = (const unsigned char *)luaL_checklstring(L, 3, &mlen);
    if (klen != 32 || slen != 64) {
        lua_pushboolean(L, 0);
        return 1;
    }
    EVP_PKEY *pkey = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, key, klen);
    if (pkey == NULL) {
        ERR_clear_error();
        return luaL_error(L, "ed25519: OpenSSL cannot build the public key");
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx != NULL && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, pkey) == 1
             && EVP_DigestVerify(ctx, sig, slen, msg, mlen) == 1;
    EVP_MD_CTX_free(ctx);
    EVP_PKEY_free(pkey);
    ERR_clear_error();
    lua_pushboolean(L, ok);
    return 1;
}

static const luaL_Reg functions[] = {{"verify", verify}, {NULL, NULL}};

int luaopen_converge_ed25519(lua_State *L)
{
    luaL_newlib(L, functions);
    return 1;
}
