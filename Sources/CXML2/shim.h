#include <dlfcn.h>
#include <stddef.h>

/* libxml2's pull reader (xmlreader.h), opened with dlopen when a KeePass XML export is imported,
 * not linked: libxml2 brings ICU, which would cost every other command's start. Its headers sit
 * under /usr/include/libxml2, which a system module without pkg-config cannot name, so the few
 * declarations vault uses are repeated here as libxml2 2.9 publishes them (ABI-stable since 2.6). */
typedef unsigned char vault_xmlChar;
typedef struct vault_xmlTextReader vault_xmlTextReader;
typedef void (*vault_xmlTextReaderErrorFunc)(void *_Nullable arg, const char *_Nullable msg, int severity, void *_Nullable locator);
/* xmlInputReadCallback: fills `buffer` with up to `len` bytes; 0 at the end, -1 on an error. */
typedef int (*vault_xmlInputReadCallback)(void *_Nullable context, char *_Nonnull buffer, int len);
typedef int (*vault_xmlInputCloseCallback)(void *_Nullable context);

/* xmlReaderTypes */
static const int VAULT_XML_READER_ELEMENT = 1;
static const int VAULT_XML_READER_TEXT = 3;
static const int VAULT_XML_READER_CDATA = 4;
static const int VAULT_XML_READER_DOCUMENT_TYPE = 10;
static const int VAULT_XML_READER_WHITESPACE = 13;
static const int VAULT_XML_READER_SIGNIFICANT_WHITESPACE = 14;
static const int VAULT_XML_READER_END_ELEMENT = 15;
/* xmlParserOption: no error or warning printed by libxml2 itself, no network. */
static const int VAULT_XML_PARSE_NOERROR = 1 << 5;
static const int VAULT_XML_PARSE_NOWARNING = 1 << 6;
static const int VAULT_XML_PARSE_NONET = 1 << 11;

struct vault_xml2_api {
    vault_xmlTextReader *_Nullable (*_Nonnull xmlReaderForIO)(vault_xmlInputReadCallback _Nonnull ioread,
                                                              vault_xmlInputCloseCallback _Nullable ioclose, void *_Nullable ioctx,
                                                              const char *_Nullable url, const char *_Nullable encoding, int options);
    int (*_Nonnull xmlTextReaderRead)(vault_xmlTextReader *_Nonnull reader);
    int (*_Nonnull xmlTextReaderNodeType)(vault_xmlTextReader *_Nonnull reader);
    int (*_Nonnull xmlTextReaderIsEmptyElement)(vault_xmlTextReader *_Nonnull reader);
    const vault_xmlChar *_Nullable (*_Nonnull xmlTextReaderConstName)(vault_xmlTextReader *_Nonnull reader);
    const vault_xmlChar *_Nullable (*_Nonnull xmlTextReaderConstValue)(vault_xmlTextReader *_Nonnull reader);
    int (*_Nonnull xmlTextReaderMoveToAttribute)(vault_xmlTextReader *_Nonnull reader, const vault_xmlChar *_Nonnull name);
    int (*_Nonnull xmlTextReaderMoveToElement)(vault_xmlTextReader *_Nonnull reader);
    int (*_Nonnull xmlTextReaderGetParserLineNumber)(vault_xmlTextReader *_Nonnull reader);
    void (*_Nonnull xmlTextReaderSetErrorHandler)(vault_xmlTextReader *_Nonnull reader, vault_xmlTextReaderErrorFunc _Nullable f,
                                                  void *_Nullable arg);
    void (*_Nonnull xmlFreeTextReader)(vault_xmlTextReader *_Nonnull reader);
};

/* Fills `api` (RTLD_NOW: a missing symbol fails here). Returns NULL, or the loader's message. */
static inline const char *_Nullable vault_xml2_open(struct vault_xml2_api *_Nonnull api) {
    void *h = dlopen("libxml2.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) return dlerror();
#define VAULT_XML2_SYM(name) if (!(*(void **)&api->name = dlsym(h, #name))) return dlerror();
    VAULT_XML2_SYM(xmlReaderForIO)
    VAULT_XML2_SYM(xmlTextReaderRead)
    VAULT_XML2_SYM(xmlTextReaderNodeType)
    VAULT_XML2_SYM(xmlTextReaderIsEmptyElement)
    VAULT_XML2_SYM(xmlTextReaderConstName)
    VAULT_XML2_SYM(xmlTextReaderConstValue)
    VAULT_XML2_SYM(xmlTextReaderMoveToAttribute)
    VAULT_XML2_SYM(xmlTextReaderMoveToElement)
    VAULT_XML2_SYM(xmlTextReaderGetParserLineNumber)
    VAULT_XML2_SYM(xmlTextReaderSetErrorHandler)
    VAULT_XML2_SYM(xmlFreeTextReader)
#undef VAULT_XML2_SYM
    return NULL;
}
