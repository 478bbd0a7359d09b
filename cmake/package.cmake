# package.cmake — what a node needs besides the libraries (install.cmake):
# man pages, the systemd units, the default /etc/memdecay/memdecayd.conf,
# and `cpack -G DEB` for the memdecay .deb (docs/operations.md, "Package").
#
# The units and the /etc file go to absolute paths, so they belong to the
# `system` component, left out of a plain `cmake --install` (which must stay
# usable with any --prefix, unprivileged); the .deb takes both components.
# `cmake --install BUILD --component system` installs them by hand.
set(_md_pkg ${PROJECT_SOURCE_DIR}/packaging)

install(FILES ${PROJECT_SOURCE_DIR}/man/memdecayd.8 DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)
install(FILES ${PROJECT_SOURCE_DIR}/man/memdecayctl.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${PROJECT_SOURCE_DIR}/man/memdecayd.conf.5 DESTINATION ${CMAKE_INSTALL_MANDIR}/man5)

set(MEMDECAY_SYSTEMD_UNITDIR /lib/systemd/system CACHE PATH
  "Where the system component puts memdecayd.service and memdecayd.socket")
install(FILES ${_md_pkg}/systemd/memdecayd.service ${_md_pkg}/systemd/memdecayd.socket
  DESTINATION ${MEMDECAY_SYSTEMD_UNITDIR} COMPONENT system EXCLUDE_FROM_ALL)
install(FILES ${_md_pkg}/memdecayd.conf
  DESTINATION /etc/memdecay COMPONENT system EXCLUDE_FROM_ALL)

set(CPACK_PACKAGE_NAME memdecay)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "MemDecay")
set(CPACK_PACKAGE_CONTACT "MemDecay maintainers <memdecay@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "region-aware KV-cache eviction daemon for LLM engines")
set(CPACK_PACKAGE_DESCRIPTION
  "memdecayd decides which KV-cache pages inference engines free under a budget; \
engines attach over a Unix socket and shared-memory rings.  Contains memdecayd, \
memdecayctl, memdecay-loadgen, libmemdecay with its headers, pkg-config and CMake \
files, systemd units and man pages.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_CMAKE_PROJECTS
  "${PROJECT_BINARY_DIR};memdecay;ALL;/;${PROJECT_BINARY_DIR};memdecay;system;/")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://localhost/memdecay")
# library dependencies from dpkg-shlibdeps (dpkg-dev), plus the postinst's
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${_md_pkg}/debian/conffiles ${_md_pkg}/debian/postinst
  ${_md_pkg}/debian/prerm ${_md_pkg}/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_GENERATOR DEB)
include(CPack)
