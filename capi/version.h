/* The library's version: sandtrap_version(). Written from the file VERSION by
 * scripts/version.sh (make lint checks that they agree); do not edit. */
#define SANDTRAP_VERSION_STRING "0.1.0"
